package checker

import (
	"github.com/velvetrope/velvetrope/config"
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

// hotNear says whether e's near-band charges go to the shared counter
// (a window counter: config allows shards on window algorithms only).
func hotNear(e *entry) bool {
	r := e.rule
	return r.Shards > 1 && r.Algorithm != config.AlgSlidingWindow && r.NearLimit == config.NearSync
}

// hotOthers is the other instances' near-band charges at the shared
// counter in the current window, as last answered (x: the key's extra).
func (w *windowCounter) hotOthers(x *extra) int64 {
	if x != nil && x.hotWindow == w.cur.start {
		return x.hotOthers
	}
	return 0
}

// curOthers is the other instances' applied consumption in the current
// window: their shards, and their charges at the shared counter.
func (w *windowCounter) curOthers(x *extra) int64 { return w.cur.others() + w.hotOthers(x) }

// curMine is everything this instance counted in its current window,
// less its part when an operator last reset the shared counter.
func (w *windowCounter) curMine(x *extra) int64 {
	m := w.cur.mine()
	if x != nil && x.hotWindow == w.cur.start {
		m -= x.hotBase
	}
	return m
}

// learnHot records a read or charge answer of e's shared counter for
// window: its total, this instance's part of it and its reset base;
// ownSync is this instance's charges there as the store holds them: a
// key created again (after an eviction) takes back what it forgot.
func (w *windowCounter) learnHot(e *entry, window, total, own, base, ownSync int64) {
	if window == w.cur.start {
		x := e.more()
		x.hotWindow, x.hotOthers, x.hotBase = window, max(0, total-own), base
		w.cur.charged = max(w.cur.charged, ownSync)
	}
}
