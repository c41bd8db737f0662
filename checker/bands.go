package checker

import (
	"time"

	"github.com/velvetrope/velvetrope/internal/rates"
)

// band is where a decision stands against its key's limit (docs/design.md).
type band uint8

const (
	bandFar   band = iota // room beyond the near band: decided from memory
	bandNear              // within it, or too young, stale or lagging to know: a store charge, or a slice
	bandOver              // a store answer and this view agree there is no room: refused from memory
	bandFirst             // no store answer for the window yet: decided from memory on the first-touch allowance
)

// bandOf places a decision of cost on e, given its look (requires the
// lock); room is the far band's margin beyond the threshold.
func (c *Checker) bandOf(e *entry, lk *look, now, cost int64) (band, int64) {
	// (not a stale view's refusal: a reset may have made room; not a
	// probe's; a key restored from its tombstone knows only it was over)
	over := !e.stale && (e.overUntil > now || (cost > e.room && now < e.roomUntil))
	if over && cost > 0 && (cost > lk.remaining || e.restored && !e.Answered()) {
		return bandOver, 0
	}
	if c.firstTouchAdmits(e, now, cost) {
		return bandFirst, 0
	}
	// Near until two answers taught the fleet's rate (the others'
	// in-flight hits cannot be bounded before), and while young: its
	// other users may not have reached the store yet.
	room := lk.remaining - lk.pred - cost - e.Threshold(c.band, e.used, lk.ceiling)
	if room < 0 || !e.Taught() || e.stale || now-e.created < int64(c.cfg.MinRefresh+c.cfg.PipelineLag) ||
		e.x != nil && e.x.lagging {
		return bandNear, 0
	}
	return bandFar, room
}

// replan re-reads a far key that sped up before it can reach its band
// (once per live-rate window, when e.Recheck; requires the lock).
func (c *Checker) replan(sh *shard, e *entry, now, room int64) {
	e.Recheck = false
	if rate := e.Fleet(e.used); rate > 0 {
		// room × 1 s in 128 bits: a limit near the int64 bound has room for it
		if wait := max(rates.MulDiv(room, int64(time.Second), 2*rate), int64(c.cfg.RefreshTick)); wait < e.nextRefresh-now {
			sh.schedule(e, now+wait)
		}
	}
}

// extra is what only some keys need: a near_limit: async key's slice
// and lag samples, and what a hot key (`shards: N`) knows of the
// near-band charges at its shared counter (hot.go).
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

// capped says whether cost more hits take this instance past its slice
// (requires the lock). A window's first is cut from the view or, not read
// in it yet, is the ceiling over the live checkers; recut re-cuts it.
func (c *Checker) capped(e *entry, now, cost, remaining, ceiling int64) bool {
	n := c.fleet(e)
	if n <= 1 || cost <= 0 {
		return false
	}
	fresh := e.x == nil
	q := &e.more().Slice
	if start, _ := e.ctr.window(e.rule); fresh || q.Window != start {
		*q = rates.Slice{At: now, Window: start, Mine: ceiling / n}
		if e.Answered() && e.ctr.known() {
			q.Mine = rates.Cut(max(0, remaining-e.InFlight(c.cfg.PipelineLag)), n, e.Own, e.Own+e.Others)
		}
	}
	return q.Spent+cost > q.Mine
}

// recut gives e a new slice after a store answer (requires the lock): its
// share of what remained less the others' in-flight hits. A slice lasts
// a pipeline lag (configured, or measured when longer): the slices cut
// before it are in the store (docs/design.md, "quota slices").
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
		// lagging beyond the samples: near, no far decision on such a view
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
