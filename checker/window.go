package checker

import (
	"math/bits"
	"time"

	"github.com/velvetrope/velvetrope/config"
)

// windowCounter is a window-kind key's state: the current and previous
// window.
type windowCounter struct {
	cur, prev winState
}

// absorb takes in a store answer for the current window. fresh says the
// key was created since the store last answered: the store then knows
// parts of this instance's consumption the entry has forgotten, less
// chargedNow, the hits of the charge that produced the answer, which the
// caller counts itself.
func (w *windowCounter) absorb(a answer, fresh bool, chargedNow int64) {
	if fresh {
		w.cur.emitted = max(w.cur.emitted, a.ownMem)
		w.cur.charged = max(w.cur.charged, a.ownSync-chargedNow)
	}
	w.cur.total, w.cur.own, w.cur.base, w.cur.known = a.total, a.own, a.base, true
}

// winState is one window of a window-kind key.
type winState struct {
	start   int64 // window start, unix ns; 0 = none
	emitted int64 // this instance's hits decided in memory in the window (exact)
	charged int64 // this instance's hits the store charged in the window
	total   int64 // the store's applied total at the last answer (this instance's shard)
	own     int64 // the part of total that is this instance's
	shards  int64 // the other shards' totals at the last read (`shards: N`)
	// base is this instance's part (emitted + charged) when an operator
	// last reset the counter: counted, but no longer used.
	base  int64
	known bool // the store answered for this window
}

// others is the applied consumption of other instances in w.
func (w *winState) others() int64 { return max(0, w.total-w.own) + w.shards }

// mine is everything this instance counted in w.
func (w *winState) mine() int64 { return w.emitted + w.charged - w.base }

// windowStart aligns now down to a multiple of w.
func windowStart(now, w int64) int64 {
	m := now % w
	if m < 0 {
		m += w
	}
	return now - m
}

// roll moves e's windows to the one containing now (requires the shard
// lock); consumption pending for the window left behind leaves at once,
// as an orphan delta, so each window's consumption goes in one delta.
func (c *Checker) roll(sh *shard, e *entry, now int64) {
	W := int64(e.rule.Window)
	ws := windowStart(now, W)
	if ws <= e.cur.start {
		return // same window, or a clock behind it: stay
	}
	// own_after only once the store has told us our part (a key created
	// again counts from zero until then, and the counter adds all of it)
	own := int64(0)
	if e.answered {
		own = e.cur.emitted
	}
	if e.lazy { // nothing left to emit once its orphans go: the next decision queues it anew
		sh.unlazy(e)
		e.dirty = false
	}
	if e.pendApplied.used() { // store charges of the window left behind
		sh.orphans = append(sh.orphans, c.delta(e, &e.pendApplied, true, own))
		e.pendApplied = pending{}
	}
	if e.pend.used() {
		sh.orphans = append(sh.orphans, c.delta(e, &e.pend, false, own))
		e.pend = pending{}
	}
	if ws == e.cur.start+W {
		e.prev = e.cur
	} else {
		e.prev = winState{}
	}
	e.cur = winState{start: ws}
	e.answerRemaining, e.sinceAnswer = -1, 0 // nothing known of the new window yet
	if e.overUntil <= ws {
		e.overUntil = 0
	}
	e.room, e.roomUntil = 0, 0
}

// view is a key's state as one decision sees it.
type view struct {
	used      int64 // applied-or-own consumption (windows), for the report
	pred      int64 // predicted others' in-flight consumption
	remaining int64 // what is left now, before this request, reported
	ceiling   int64
}

// windowView computes a window key's view at now (requires the lock).
func (c *Checker) windowView(e *entry, now int64) view {
	r := e.rule
	v := view{ceiling: r.Ceiling()}
	W := int64(r.Window)
	v.pred = c.inFlight(e)
	if !e.cur.known {
		v.pred += e.othersRate * min(now-e.cur.start, W) / int64(time.Second)
	}
	cur := e.curMine() + e.curOthers()
	if r.Algorithm != config.AlgSlidingWindow {
		v.used = cur
		v.remaining = max(0, v.ceiling-cur)
		return v
	}
	prev := int64(0)
	if e.prev.start == e.cur.start-W {
		prev = e.prev.mine() + e.prev.others()
	}
	el := min(max(now-e.cur.start, 0), W)
	// remaining = floor((C·W − prev·(W−el) − cur·W) / W)
	hi, lo := bits.Mul64(uint64(prev), uint64(W-el))
	ch, cl := bits.Mul64(uint64(max(v.ceiling-cur, 0)), uint64(W))
	if ch > hi || ch == hi && cl > lo {
		dl, b := bits.Sub64(cl, lo, 0)
		dh := ch - hi - b
		q, _ := bits.Div64(dh, dl, uint64(W))
		v.remaining = int64(q)
	}
	v.used = cur
	return v
}

// decideWindow decides s from memory for a window key (requires the lock).
// Envoy-semantics rules are charged here, allowed or not.
func (c *Checker) decideWindow(s *slot, v view, now, cost int64) {
	e, r := s.e, s.rule
	W := int64(r.Window)
	fits := cost <= v.ceiling
	// cost <= floor(x) exactly when cost <= x: the floored remaining of the
	// sliding window decides as the exact weighted comparison does. The
	// prediction chose the band; a decision counts only consumption known
	// to have happened, so no rule refuses below its limit on a guess.
	s.allowed = fits && cost <= v.remaining && !s.capped
	s.remaining = v.remaining
	if s.allowed {
		s.remaining -= cost
	}
	s.resetAfter = c.windowReset(e, now, s.allowed, cost)
	s.resetBefore = c.windowReset(e, now, false, 0)
	if !s.allowed {
		s.never = !fits
		if fits {
			s.retryAfter = c.windowRetry(e, v, now, cost)
		}
		if s.capped { // a new slice comes with the next store answer
			s.retryAfter = max(s.retryAfter, c.cfg.MinRefresh)
		}
	}
	if r.Algorithm == config.AlgEnvoy { // Envoy: every call counts
		s.charged = true
		c.count(s, now, cost, s.allowed)
		s.remaining = max(0, v.remaining-cost)
		s.resetAfter = time.Duration(e.cur.start + W - now)
		if s.allowed {
			e.pend.above(s)
		}
	}
	if !s.allowed && v.remaining <= 0 {
		e.overUntil = max(e.overUntil, now+int64(s.retryAfter))
	}
}

func (c *Checker) windowReset(e *entry, now int64, charged bool, cost int64) time.Duration {
	W := int64(e.rule.Window)
	cur := e.curMine() + e.curOthers()
	if charged {
		cur += cost
	}
	if e.rule.Algorithm == config.AlgSlidingWindow {
		switch {
		case cur > 0:
			return time.Duration(e.cur.start + 2*W - now)
		case e.prev.start == e.cur.start-W && e.prev.mine()+e.prev.others() > 0:
			return time.Duration(e.cur.start + W - now)
		}
		return 0
	}
	if cur == 0 {
		return 0
	}
	return time.Duration(e.cur.start + W - now)
}

// windowRetry: when cost fits again if nothing else arrives (the same
// formulas as limiter.FixedWindow and limiter.SlidingWindow).
func (c *Checker) windowRetry(e *entry, v view, now, cost int64) time.Duration {
	W := int64(e.rule.Window)
	end := e.cur.start + W
	if e.rule.Algorithm != config.AlgSlidingWindow {
		return time.Duration(end - now)
	}
	cur := e.curMine() + e.curOthers()
	prev := int64(0)
	if e.prev.start == e.cur.start-W {
		prev = e.prev.mine() + e.prev.others()
	}
	if cur <= v.ceiling-cost && prev > 0 {
		// smallest el' with prev·(W−el') <= (C−cur−cost)·W, counted from
		// now: a clock behind the window's start waits for it too
		hi, lo := bits.Mul64(uint64(v.ceiling-cur-cost), uint64(W))
		q := uint64(W)
		if hi < uint64(prev) {
			q, _ = bits.Div64(hi, lo, uint64(prev))
		}
		return time.Duration(end - int64(min(q, uint64(W))) - now)
	}
	if cur == 0 {
		return time.Duration(end - now)
	}
	hi, lo := bits.Mul64(uint64(v.ceiling-cost), uint64(W))
	q := uint64(W)
	if hi < uint64(cur) {
		q, _ = bits.Div64(hi, lo, uint64(cur))
	}
	wait := end - now
	if q < uint64(W) {
		wait += W - int64(q)
	}
	return time.Duration(wait)
}
