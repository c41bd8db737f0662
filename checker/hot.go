package checker

import (
	"github.com/velvetrope/velvetrope/config"
)

// A hot key spread over shards (`shards: N`) counts its far-band
// consumption in this instance's own shard and, near its limit under
// near_limit: sync, charges the one unsharded counter every instance
// charges there (docs/design.md, "Hot keys: shards: N").

// hotNear says whether e's near-band charges go to the shared counter
// (a window counter: config allows shards on window algorithms only).
func hotNear(e *entry) bool {
	r := e.rule
	return r.Shards > 1 && r.Algorithm != config.AlgSlidingWindow && r.NearLimit == config.NearSync
}

// hotOthers is the other instances' near-band charges at the shared
// counter in the current window, as last answered (x: the key's extra).
func (w *windowCounter) hotOthers(x *extra) int64 {
	if x != nil && x.hotWindow == w.cur.Start {
		return x.hotOthers
	}
	return 0
}

// curOthers is the other instances' applied consumption in the current
// window: their shards, and their charges at the shared counter.
func (w *windowCounter) curOthers(x *extra) int64 { return w.cur.Others() + w.hotOthers(x) }

// curMine is everything this instance counted in its current window,
// less its part when an operator last reset the shared counter.
func (w *windowCounter) curMine(x *extra) int64 {
	m := w.cur.Mine()
	if x != nil && x.hotWindow == w.cur.Start {
		m -= x.hotBase
	}
	return m
}

// learnHot records an answer of e's shared counter for window; ownSync,
// this instance's charges there as the store holds them, restores what a
// key created again forgot.
func (w *windowCounter) learnHot(e *entry, window, total, own, base, ownSync int64) {
	if window == w.cur.Start {
		x := e.more()
		x.hotWindow, x.hotOthers, x.hotBase = window, max(0, total-own), base
		w.cur.Charged = max(w.cur.Charged, ownSync)
	}
}
