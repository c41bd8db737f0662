// Package estimate is what an async checker knows of one shared counter:
// its own consumption, exactly, and the store's last answer, from which
// it estimates the counter's global state (docs/design.md, "How the
// checker decides"). Pure: answers and admissions in, counts out; the
// checker's window and bucket counters each hold one, under their key's
// lock.
package estimate

import (
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
)

// Window is one window of a window-kind counter as this instance knows it.
type Window struct {
	Start   int64 // the window's start, unix ns; 0: none
	Emitted int64 // this instance's hits decided in memory in the window (exact)
	Charged int64 // this instance's hits the store charged in the window
	Total   int64 // the store's applied total at the last answer (this instance's shard)
	Own     int64 // the part of Total that is this instance's
	Shards  int64 // the other shards' totals at the last read (`shards: N`)
	Base    int64 // this instance's part when an operator last reset the counter
	Known   bool  // the store answered for this window
}

// Others is the other instances' applied consumption in the window.
func (w *Window) Others() int64 { return max(0, w.Total-w.Own) + w.Shards }

// Mine is everything this instance counted in the window since the
// counter was last reset.
func (w *Window) Mine() int64 { return w.Emitted + w.Charged - w.Base }

// Absorb takes in a store answer for the window. A counter created since
// it last answered (fresh) takes back what the store knows of this
// instance's consumption, less chargedNow (the answering charge's own
// hits, which the caller counts).
func (w *Window) Absorb(total, own, base, ownMem, ownSync int64, fresh bool, chargedNow int64) {
	if fresh {
		w.Emitted = max(w.Emitted, ownMem)
		w.Charged = max(w.Charged, ownSync-chargedNow)
	}
	w.Total, w.Own, w.Base, w.Known = total, own, base, true
}

// Bucket is a bucket-kind counter as this instance knows it: its exact
// view of the bucket (a GCRA state its admissions advance and store
// answers raise), its cumulative hits and the store's at the last answer.
type Bucket struct {
	State       limiter.State
	Cum         int64 // hits decided in memory, cumulative
	CumCharged  int64 // hits the store charged, cumulative
	StoreOwnCum int64 // the store's cumulative hits of this instance
	StoreCum    int64 // the store's cumulative hits of every instance
	Gen         int64 // the bucket's resets, as the store last said
}

// GCRA is the async form of every bucket algorithm of r: token bucket,
// GCRA and the leaky-bucket meter admit the same requests.
func GCRA(r *config.Rule) limiter.GCRA {
	return limiter.GCRA{Burst: r.Capacity(), Rate: limiter.Rate{Tokens: r.Limit, Period: r.Window}}
}

// Peek is what the bucket would answer at now for cost, unchanged (cost
// 0: its remaining and reset).
func (b *Bucket) Peek(r *config.Rule, now, cost int64) limiter.Decision {
	st := b.State
	d, _ := GCRA(r).AllowAt(&st, now, cost)
	return d
}

// Others is the other instances' applied consumption.
func (b *Bucket) Others() int64 { return max(0, b.StoreCum-b.StoreOwnCum) }

// Mine is everything this instance counted.
func (b *Bucket) Mine() int64 { return b.Cum + b.CumCharged }

// Rebase takes back what the store knows of this instance's consumption
// when the counter was created since it last answered (Window.Absorb's
// fresh).
func (b *Bucket) Rebase(ownMem, ownSync, chargedNow int64) {
	b.Cum = max(b.Cum, ownMem)
	b.CumCharged = max(b.CumCharged, ownSync-chargedNow)
}

// Absorb takes in the store's bucket at now, if found: the view is raised
// to the store's TAT plus what this instance counted that the store has
// not applied yet; an operator's reset (a new gen) forgets the view first.
func (b *Bucket) Absorb(r *config.Rule, found bool, tat, cum, own, ownMem, gen, now int64) {
	if !found {
		return
	}
	if gen != b.Gen {
		b.State, b.Gen = limiter.State{}, gen
		// the reset bucket's TAT lies in the past: the unapplied hits
		// count from now, or the forgotten view would forget them too
		tat = max(tat, now)
	}
	b.StoreCum, b.StoreOwnCum = cum, own
	GCRA(r).Raise(&b.State, tat+counters.Span(max(0, b.Cum-ownMem), int64(r.Window), r.Limit))
}
