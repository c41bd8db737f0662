package checker

import (
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
)

// A hot key spread over shards (`shards: N`) counts its far-band
// consumption in this instance's own shard, which spreads Kafka
// partitions, aggregator work and Redis writes. Near its limit, under the
// default near_limit: sync, every instance charges one counter instead:
// the unsharded key, whose script checks its own total (every instance's
// near-band charges, atomically) plus the shards as this instance last
// read them (its own with its unapplied hits). So near the limit all
// admissions are serialised through one place and see each other, as for
// an unsharded key; what the check can miss is the far-band consumption
// of the other shards since the last read, which the near band's
// threshold covers as it covers in-flight hits (refresh interval plus
// pipeline lag). Cost: one more read per refresh (the shared counter) and
// near-band charges on one Redis slot. Sliding windows keep charging
// their own shard (the previous window's weight would need every shard in
// one script): a small overshoot there is measured, not excluded.

// hotNear says whether e's near-band charges go to the shared counter.
func hotNear(e *entry) bool {
	r := e.rule
	return r.Shards > 1 && e.kind == counters.KindWindow && r.Algorithm != config.AlgSlidingWindow && r.NearLimit == config.NearSync
}

// hotOthers is the other instances' near-band charges at the shared
// counter in e's current window, as last answered.
func (e *entry) hotOthers() int64 {
	if e.x != nil && e.x.hotWindow == e.cur.start {
		return e.x.hotOthers
	}
	return 0
}

// curOthers is the other instances' applied consumption in e's current
// window: their shards, and their charges at the shared counter.
func (e *entry) curOthers() int64 { return e.cur.others() + e.hotOthers() }

// curMine is everything this instance counted in its current window,
// less its part when an operator last reset the shared counter.
func (e *entry) curMine() int64 {
	m := e.cur.mine()
	if e.x != nil && e.x.hotWindow == e.cur.start {
		m -= e.x.hotBase
	}
	return m
}

// learnHot records a read or charge answer of the shared counter for
// window: its total, this instance's part of it and its reset base;
// ownSync is this instance's charges there as the store holds them: a
// key created again (after an eviction) takes back what it forgot.
func (e *entry) learnHot(window, total, own, base, ownSync int64) {
	if window == e.cur.start {
		x := e.more()
		x.hotWindow, x.hotOthers, x.hotBase = window, max(0, total-own), base
		e.cur.charged = max(e.cur.charged, ownSync)
	}
}
