package checker

import (
	"math/bits"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
)

// need says how a descriptor is decided.
type need uint8

const (
	needNone   need = iota // no rule, unlimited: allowed, nothing to count
	needMemory             // decided from memory
	needSync               // an atomic store charge
	needLocal              // mode local: the in-process limiter
)

// slot is one descriptor's work in a Check.
type slot struct {
	rule  *config.Rule
	key   string // aliases the pooled key buffer
	idx   int    // the descriptor's index in the request
	cost  int64  // the request's hits times the descriptors naming this counter
	dupOf int    // >= 0: another descriptor of the request names the same counter
	h     uint64
	sh    int
	e     *entry
	need  need
	local bool // mode local with an algorithm: peeked, charged at commit

	allowed    bool // this descriptor admits the request
	budgetOK   bool // local_budget would admit it if the store is down
	skipped    bool // a store charge not made: the request was already refused
	exact      bool // mode: sync, run whole by the store (counters.SyncStore)
	charged    bool // consumption already recorded (Envoy semantics, sync)
	degraded   bool
	shadowed   bool
	remaining  int64 // against the ceiling, after this request
	resetAfter time.Duration
	retryAfter time.Duration
	never      bool

	w *syncWork // the store charge, when one is made
	// resetBefore is the reset as things stand, reported when the request
	// is refused by another descriptor and nothing is charged here.
	resetBefore time.Duration
	// post is a bucket key's state after this request's charge, computed
	// once by the decision and stored by the commit.
	post limiter.State
}

// gcraOf is the async form of every bucket algorithm: token bucket, GCRA
// and the leaky-bucket meter admit the same requests.
func gcraOf(r *config.Rule) limiter.GCRA {
	return limiter.GCRA{Burst: r.Capacity(), Rate: limiter.Rate{Tokens: r.Limit, Period: r.Window}}
}

// peek is what a bucket key would answer at now for cost, without
// changing it (cost 0: its remaining and reset).
func peek(e *entry, now, cost int64) limiter.Decision {
	st := e.gs
	d, _ := gcraOf(e.rule).AllowAt(&st, now, cost)
	return d
}

// inFlight is the other instances' consumption predicted to be on its way
// through the pipeline: their learned rate × one pipeline lag. It chooses
// a band; it never refuses.
func (c *Checker) inFlight(e *entry) int64 {
	return e.othersRate * int64(c.cfg.PipelineLag) / int64(time.Second)
}

func kindOf(r *config.Rule) counters.Kind {
	if r.Algorithm.Bucket() {
		return counters.KindTAT
	}
	return counters.KindWindow
}

// windowStart aligns now down to a multiple of w.
func windowStart(now, w int64) int64 {
	m := now % w
	if m < 0 {
		m += w
	}
	return now - m
}

// roll moves e's windows to the one containing now (requires the shard
// lock); consumption pending for the window left behind moves to pendOld.
func (c *Checker) roll(sh *shard, e *entry, now int64) {
	W := int64(e.rule.Window)
	ws := windowStart(now, W)
	if ws <= e.cur.start {
		return // same window, or a clock behind it: stay
	}
	if e.pend.used {
		if e.pendOld.used {
			sh.orphans = append(sh.orphans, c.delta(e, &e.pendOld, false, e.prev.emitted))
		}
		e.pendOld, e.pend = e.pend, pending{}
	}
	if e.pendApplied.used { // store charges of the window left behind: emit them as they are
		own := int64(0)
		if e.answered {
			own = e.cur.emitted
		}
		sh.orphans = append(sh.orphans, c.delta(e, &e.pendApplied, true, own))
		e.pendApplied = pending{}
	}
	if ws == e.cur.start+W {
		e.prev = e.cur
	} else {
		e.prev = winState{}
	}
	e.cur = winState{start: ws}
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
	cur := e.cur.mine() + e.cur.others()
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

// threshold is the near-limit band's width in hits for e: at least the
// floor, and the hits the whole fleet can take during one refresh interval
// plus one pipeline lag, times the safety factor.
func (c *Checker) threshold(e *entry, ceiling int64) int64 {
	th := max(c.cfg.NearFloor, ceiling*c.cfg.NearFloorPercent/100)
	k := int64(c.cfg.MinRefresh+c.cfg.PipelineLag) * c.cfg.SafetyPercent / 100 // ns of fleet consumption to cover
	// learned rates (and the last full live window): one division by a constant
	learned := max(e.othersRate, e.live*int64(e.instances-1)) + max(e.ownRate, e.live)
	th = max(th, learned*(k/int64(time.Millisecond))/1000)
	// the live window in progress: a burst counts at once, every instance
	// assumed to go as fast
	if e.liveHits > 0 {
		th = max(th, e.liveHits*int64(e.instances)*k/max(e.used-e.liveFrom, int64(time.Millisecond)))
	}
	return th
}

// rate is the fleet's rate on e in hits per second: the learned one, or —
// when this instance goes faster than that — its live rate, with every
// other instance assumed to go as fast.
func (c *Checker) rate(e *entry) int64 {
	live := e.live
	if e.liveHits > 0 && e.liveFrom > 0 { // the window in progress: a burst counts at once
		live = max(live, e.liveHits*int64(time.Second)/max(e.used-e.liveFrom, int64(time.Millisecond)))
	}
	return max(e.othersRate, live*int64(e.instances-1)) + max(e.ownRate, live)
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
	s.allowed = fits && cost <= v.remaining
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
	}
	if r.Algorithm == config.AlgEnvoy { // Envoy: every call counts
		s.charged = true
		c.count(e, now, cost, s.allowed, true)
		s.remaining = max(0, v.remaining-cost)
		s.resetAfter = time.Duration(e.cur.start + W - now)
	}
	if !s.allowed && v.remaining <= 0 {
		e.overUntil = max(e.overUntil, now+int64(s.retryAfter))
	}
}

func (c *Checker) windowReset(e *entry, now int64, charged bool, cost int64) time.Duration {
	W := int64(e.rule.Window)
	cur := e.cur.mine() + e.cur.others()
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
	cur := e.cur.mine() + e.cur.others()
	prev := int64(0)
	if e.prev.start == e.cur.start-W {
		prev = e.prev.mine() + e.prev.others()
	}
	el := min(max(now-e.cur.start, 0), W)
	if cur <= v.ceiling-cost && prev > 0 {
		// smallest el' with prev·(W−el') <= (C−cur−cost)·W
		hi, lo := bits.Mul64(uint64(v.ceiling-cur-cost), uint64(W))
		q := uint64(W)
		if hi < uint64(prev) {
			q, _ = bits.Div64(hi, lo, uint64(prev))
		}
		return time.Duration(W - int64(min(q, uint64(W))) - el)
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

// decideTAT decides s from memory for a bucket key (requires the lock).
func (c *Checker) decideTAT(s *slot, try limiter.Decision, before, now, cost int64) {
	e := s.e
	s.allowed = try.Allowed // the prediction chose the band, it does not refuse
	s.resetAfter = try.ResetAfter
	if s.allowed {
		s.remaining = try.Remaining
		s.resetBefore = max(0, try.ResetAfter-time.Duration(counters.Span(cost, int64(s.rule.Window), s.rule.Limit)))
		return
	}
	s.remaining = before
	s.retryAfter = try.RetryAfter
	if before == 0 {
		e.overUntil = max(e.overUntil, now+int64(s.retryAfter))
	}
}

// count records consumption decided in memory (requires the lock): to the
// own counters, and to the pending delta.
func (c *Checker) count(e *entry, now, cost int64, allowed, charge bool) {
	p := &e.pend
	if e.kind == counters.KindWindow {
		p.window = e.cur.start
	}
	p.tally(now, cost, allowed)
	if charge {
		e.observe(now, cost)
		p.counted += uint64(cost)
		e.sinceAnswer += cost
		if e.kind == counters.KindWindow {
			e.cur.emitted += cost
		} else {
			e.cum += cost
		}
	}
}

// observe feeds this instance's own consumption into its live rate.
func (e *entry) observe(now, cost int64) {
	if now-e.liveFrom >= int64(rateSpan) {
		if e.liveFrom > 0 {
			e.live = e.liveHits * int64(time.Second) / (now - e.liveFrom)
		}
		e.liveFrom, e.liveHits, e.recheck = now, 0, true
	}
	e.liveHits += cost
}
