package checker

import (
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
)

// bucketCounter is a bucket-kind key's state: this instance's exact view
// of the bucket (a GCRA state that its own admissions advance and store
// answers raise), its cumulative counted hits, and the store's cumulative
// totals at the last answer.
type bucketCounter struct {
	gs          limiter.State
	cum         int64 // hits decided in memory, cumulative
	cumCharged  int64 // hits the store charged, cumulative
	storeOwnCum int64
	storeCum    int64
	gen         int64 // the bucket's resets, as the store last said
}

// rebase takes in this instance's parts the store knows when the key was
// created again (as windowCounter.absorb does for a fresh key).
func (b *bucketCounter) rebase(a answer, chargedNow int64) {
	b.cum = max(b.cum, a.ownMem)
	b.cumCharged = max(b.cumCharged, a.ownSync-chargedNow)
}

// absorb takes in the store's bucket at now: an operator reset forgets
// this instance's view, and the view is raised to the store's TAT plus what
// this instance counted that the store has not applied yet.
func (b *bucketCounter) absorb(a answer, g limiter.GCRA, window, limit, now int64) {
	if !a.found {
		return
	}
	tat := a.total
	if a.gen != b.gen {
		b.gs, b.gen = limiter.State{}, a.gen
		// The reset bucket's TAT lies in the past (0 when nothing came
		// since): the unapplied hits count from now, or the view,
		// forgotten with the reset, would forget them too.
		tat = max(tat, now)
	}
	b.storeCum, b.storeOwnCum = a.cum, a.own
	g.Raise(&b.gs, tat+counters.Span(max(0, b.cum-a.ownMem), window, limit))
}

// others is the other instances' applied consumption; mine everything
// this instance counted.
func (b *bucketCounter) others() int64 { return max(0, b.storeCum-b.storeOwnCum) }

func (b *bucketCounter) mine() int64 { return b.cum + b.cumCharged }

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

// decideTAT decides s from memory for a bucket key (requires the lock).
func (c *Checker) decideTAT(s *slot, try limiter.Decision, before, now, cost int64) {
	e := s.e
	s.allowed = try.Allowed && !s.capped // the prediction chose the band, it does not refuse
	s.resetAfter = try.ResetAfter
	if s.allowed {
		s.remaining = try.Remaining
		s.resetBefore = max(0, try.ResetAfter-time.Duration(counters.Span(cost, int64(s.rule.Window), s.rule.Limit)))
		return
	}
	s.remaining = before
	s.retryAfter = try.RetryAfter
	if s.capped { // a new slice comes with the next store answer
		s.retryAfter = max(s.retryAfter, c.cfg.MinRefresh)
		return
	}
	if before == 0 {
		e.overUntil = max(e.overUntil, now+int64(s.retryAfter))
	}
}
