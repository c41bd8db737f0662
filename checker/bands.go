package checker

import (
	"time"

	"github.com/velvetrope/velvetrope/internal/rates"
)

// band is where a decision stands against its key's limit
// (docs/design.md, bands).
type band uint8

const (
	// bandFar: room beyond the near band's threshold: decided from
	// memory, nothing else.
	bandFar band = iota
	// bandNear: within the threshold, or the key too young, stale or
	// lagging to know: a store charge (near_limit: sync), or this
	// instance's slice of what remained (near_limit: async).
	bandNear
	// bandOver: a store answer said there is no room (for this cost), and
	// what this instance knows agrees: refused from memory, so abusive
	// traffic costs no store calls.
	bandOver
)

// bandOf places a decision of cost on e at now, given its look (requires
// the lock); room is the far band's margin beyond the threshold.
func (c *Checker) bandOf(e *entry, lk *look, now, cost int64) (band, int64) {
	// (a stale view's refusal is not trusted: a reset or a new limit may
	// have made room since; a probe, cost 0, always passes; a key evicted
	// while over and created again knows nothing yet but that it was over)
	over := !e.stale && (e.overUntil > now || (cost > e.room && now < e.roomUntil))
	if over && cost > 0 && (cost > lk.remaining || e.restored && !e.Answered()) {
		return bandOver, 0
	}
	// Until two store answers have taught the key's global rate, the
	// others' in-flight consumption cannot be bounded: stay near. A young
	// key stays near too: its other users may not have reached the store
	// yet (two checkers starting together each see one instance).
	room := lk.remaining - lk.pred - cost - e.Threshold(c.band, e.used, lk.ceiling)
	if room < 0 || !e.Taught() || e.stale || now-e.created < int64(c.cfg.MinRefresh+c.cfg.PipelineLag) ||
		e.x != nil && e.x.lagging {
		return bandNear, 0
	}
	return bandFar, room
}

// replan re-reads a far key before it can reach its band at the rate it
// goes now: a key that speeds up is refreshed sooner than the refresher
// planned. Called once per live-rate window, when e.Recheck (requires the lock).
func (c *Checker) replan(sh *shard, e *entry, now, room int64) {
	e.Recheck = false
	if rate := e.Fleet(e.used); rate > 0 {
		// room × 1 s in 128 bits: a limit near the int64 bound has room for it
		if wait := max(rates.MulDiv(room, int64(time.Second), 2*rate), int64(c.cfg.RefreshTick)); wait < e.nextRefresh-now {
			sh.schedule(e, now+wait)
		}
	}
}

// extra is what only some keys need, kept out of every entry: the slice
// of a near_limit: async key and the samples that measure its pipeline's
// lag, and what a hot key spread over shards (`shards: N`) knows of the
// near-band charges every instance makes at its one shared counter
// (hot.go).
type extra struct {
	rates.Slice
	lag                           rates.Lag
	lagging                       bool // the last answer showed no lag within 2 × PipelineLag: stay near
	hotWindow, hotOthers, hotBase int64
}

// more returns e's extra state, made on first use (requires the lock).
func (e *entry) more() *extra {
	if e.x == nil {
		e.x = new(extra)
	}
	return e.x
}

// capped says whether cost more hits would take this instance past its
// slice (requires the lock; remaining is the key's view now). The first
// slice of a window is cut from that view; a key this instance has not
// read in its current window — never read, or a window just begun — gets the ceiling
// divided by the live checkers (cold start); afterwards each refresh at
// least one pipeline lag after the last cut re-cuts it (recut). Alone, a
// checker needs no slice: its estimate is exact.
func (c *Checker) capped(e *entry, now, cost, remaining, ceiling int64) bool {
	n := c.fleet(e)
	if n <= 1 || cost <= 0 {
		return false
	}
	fresh := e.x == nil
	q := &e.more().Slice
	if start, _ := e.ctr.window(e.rule); fresh || q.Window != start {
		*q = rates.Slice{At: now, Window: start, Mine: ceiling / n}
		if e.Answered() && e.ctr.known() { // read in this window: its view
			q.Mine = rates.Cut(max(0, remaining-e.InFlight(c.cfg.PipelineLag)), n, e.Own, e.Own+e.Others)
		}
	}
	return q.Spent+cost > q.Mine
}

// recut gives e a new slice after a store answer (requires the lock):
// its share of what remained, less the others' predicted in-flight hits.
// A slice lasts at least one pipeline lag — the configured one, or the
// lag measured on this instance's own consumption when that is longer (a
// consumer group still joining, a backlog) — so the others' consumption
// from the slices cut before it has reached the store when it is re-cut;
// the slices of one round add up to at most what remained (rates.Cut). While
// the lag is beyond what the samples measure, no slice is re-cut.
func (c *Checker) recut(e *entry, now, remaining int64) {
	if e.x == nil {
		return
	}
	q := &e.x.Slice
	start, _ := e.ctr.window(e.rule)
	if q.At == 0 || q.Window != start {
		return
	}
	lag := int64(c.cfg.PipelineLag)
	inFlight := e.InFlight(c.cfg.PipelineLag)
	if counted, own, ok := e.ctr.ownCounts(); ok { // measured on this instance's own consumption
		measured, ok := e.x.lag.Measure(now, start, counted, own, lag)
		// while the store's answers lag beyond the samples, the key stays
		// in the near band: a far decision would trust a view that misses
		// the others' spending
		e.x.lagging = !ok || measured > 2*lag
		if !ok {
			return
		}
		if measured > lag {
			inFlight = e.Others * measured / int64(time.Second)
			lag = measured
		}
	}
	if now-q.At < lag {
		return
	}
	*q = rates.Slice{At: now, Window: start, Mine: rates.Cut(max(0, remaining-inFlight), c.fleet(e), e.Own, e.Own+e.Others)}
}
