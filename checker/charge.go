package checker

import (
	"context"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/breaker"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// The near band and `mode: sync`: one atomic store charge per descriptor,
// made without any lock held, and what its answer teaches the key.

// prepareCharge fills s.w.Charge for a store charge (requires the lock).
func (c *Checker) prepareCharge(s *slot, now, cost int64) {
	e, r := s.e, s.rule
	s.need = needSync
	budget := e.answerRemaining
	if budget < 0 {
		budget = r.Capacity()
	}
	s.budgetOK = e.sinceAnswer+cost <= budget/c.fleet(e) // this instance's share
	s.w = c.work(s.w)
	q := &s.w.Charge
	*q = counters.ChargeRequest{Key: e.skey, Kind: e.kind, Instance: c.instance, Now: now, Cost: cost,
		WindowNanos: int64(r.Window), OtherShards: e.cur.shards}
	if e.kind == counters.KindWindow {
		q.Window, q.Ceiling, q.OwnEmitted = e.cur.start, r.Ceiling(), e.cur.emitted
		q.ChargeDenied = r.Algorithm == config.AlgEnvoy
		if hotNear(e) { // the shared counter: the shards as last read, own unapplied hits included (hot.go)
			q.Key, q.OwnEmitted = e.key, 0
			q.OtherShards = e.cur.shards + e.cur.total + max(0, e.cur.emitted-e.cur.own)
		}
		if r.Algorithm == config.AlgSlidingWindow {
			q.Sliding = true
			if e.prev.start == e.cur.start-int64(r.Window) {
				q.PrevEmitted, q.PrevOtherShards = e.prev.emitted, e.prev.shards
			}
		}
	} else {
		g := gcraOf(r)
		q.Burst, q.RateTokens, q.OwnCum, q.LocalTAT = g.Burst, r.Limit, e.cum, g.TAT(&e.gs)
	}
}

// charge runs the prepared store charges without any lock held. Envoy
// rules are charged whatever happens; algorithm rules only while the
// request stands, and refunded if a later descriptor refuses it. It
// returns whether the request is refused.
func (c *Checker) charge(slots []slot, denied bool, req *ratelimit.Request, now int64) bool {
	for i := range slots {
		s := &slots[i]
		if s.pool && !denied {
			// the borrowers before it have their answers: the pool pays
			// what they took above their own limits by those answers
			c.redecidePool(s, slots, req, now)
			if !s.allowed && s.need == needMemory && !s.shadowed {
				denied = true
			}
		}
		if s.need != needSync {
			continue
		}
		cost := s.cost
		if denied && !s.w.Charge.ChargeDenied { // already refused: not worth a charge
			s.skipped = true
			if s.exact { // the store alone knows this counter: probe it for the status
				s.w.SyncReq.Cost, s.w.SyncReq.RequestID = 0, ""
				var probe bool
				if probe, s.w.Err = c.admit(now); s.w.Err == nil {
					c.batch.do(s.w, c.cfg.StoreTimeout)
					c.brk.Done(now, s.w.Err, probe)
				}
			}
			continue
		}
		if cost > s.rule.Capacity() && !s.w.Charge.ChargeDenied { // can never fit: no call
			s.allowed, s.never, s.shadowed = false, true, s.rule.Shadow
			denied = denied || !s.rule.Shadow
			continue
		}
		c.Stats.SyncCharges.Add(1)
		var probe bool
		if probe, s.w.Err = c.admit(now); s.w.Err == nil { // (open breaker: no call, the failure policy decides)
			c.batch.do(s.w, c.cfg.StoreTimeout)
			c.brk.Done(now, s.w.Err, probe)
		}
		switch {
		case s.w.Err != nil:
			c.failurePolicy(s, now, cost)
		case s.exact:
			s.allowed, s.charged = s.w.SyncAnswer.Allowed, s.w.SyncAnswer.Allowed || s.w.Charge.ChargeDenied
		default:
			s.allowed, s.charged = s.w.Answer.Allowed, s.w.Answer.Allowed || s.w.Charge.ChargeDenied
			if s.rule.Pool != nil && s.allowed {
				// borrowing is what the store's count says, not this view
				s.setAbove(s.w.Answer.Total, cost)
			}
		}
		if !s.allowed && !s.rule.Shadow {
			denied = true
		}
	}
	if !denied {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StoreTimeout) // for the refunds
	defer cancel()
	for i := range slots { // a refused request charges nothing to algorithm rules
		s := &slots[i]
		if s.exact && s.w.Err == nil && s.charged && !s.w.Charge.ChargeDenied {
			c.Stats.Refunds.Add(1)
			q := s.w.SyncReq
			if err := c.store.RefundSync(ctx, &q, s.w.SyncAnswer.Token); err == nil {
				s.charged = false
			}
			continue
		}
		if s.need == needSync && s.w.Err == nil && s.charged && !s.w.Charge.ChargeDenied {
			c.Stats.Refunds.Add(1)
			q := s.w.Charge
			if err := c.store.Refund(ctx, &q); err == nil {
				s.charged = false
				// the answer described the counter with this charge in it
				s.w.Answer.Own -= s.cost
				s.w.Answer.OwnSync -= s.cost
				s.w.Answer.Cum -= s.cost
				if s.w.Charge.Kind == counters.KindWindow {
					s.w.Answer.Total -= s.cost
				} else {
					s.w.Answer.Total -= counters.Span(s.cost, s.w.Charge.WindowNanos, s.w.Charge.RateTokens)
				}
			}
		}
	}
	return true
}

// redecidePool decides a pool slot again, without any lock held, when
// its borrowers' store answers changed what they borrow: the pool's shard
// is locked for the decision alone. A pool no borrower uses any more is
// left alone.
func (c *Checker) redecidePool(p *slot, slots []slot, req *ratelimit.Request, now int64) {
	cost := borrowed(p, slots)
	decided := p.need != needNone
	switch {
	case cost == 0:
		p.cost, p.need, p.allowed = 0, needNone, true
		return
	case decided && cost == p.cost:
		return
	}
	p.cost = cost
	lk := []int{p.sh}
	c.lock(lk)
	c.decide(p, req, now)
	c.unlock(lk)
}

// admit asks the breaker whether a store call may go out now; probe says
// the call is the half-open probe, to be reported to c.brk.done.
func (c *Checker) admit(now int64) (probe bool, err error) {
	ok, probe := c.brk.Allow(now)
	if !ok {
		return false, errStoreBreakerOpen
	}
	return probe, nil
}

// errStoreBreakerOpen is a store call the open breaker refused.
var errStoreBreakerOpen = fmt.Errorf("%w: %w", counters.ErrStoreUnavailable, breaker.ErrOpen)

// failurePolicy decides a descriptor whose store charge failed.
func (c *Checker) failurePolicy(s *slot, now, cost int64) {
	s.degraded = true
	c.Stats.Degraded.Add(1)
	c.Stats.StoreErrors.Add(1)
	c.logStore.Warn("counter store unavailable; applying failure policies", "rule", s.rule.ID, "policy", s.rule.Failure, "error", s.w.Err)
	switch s.rule.Failure {
	case config.FailClosed:
		s.allowed = false
	case config.FailLocalBudget:
		// this instance's share of what remained at the last answer
		s.allowed = s.budgetOK
	default: // open
		s.allowed = true
	}
}

// applyCharges records the store's answers (requires the locks).
func (c *Checker) applyCharges(slots []slot, now int64) {
	for i := range slots {
		s := &slots[i]
		if s.need != needSync || s.e == nil || s.e.gone {
			continue
		}
		cost := s.cost
		e := s.e
		if s.w.Err != nil {
			c.degradedDecision(s, now, cost)
			continue
		}
		if s.exact && s.skipped { // a probe: report it as the exact engine's peek would
			res := s.w.SyncAnswer
			s.never = cost > s.rule.Capacity()
			s.allowed = !s.never && cost <= res.Remaining
			s.remaining, s.resetAfter = res.Remaining, res.ResetAfter
			if s.allowed {
				s.remaining -= cost
			} else if s.never {
				s.remaining = 0
			}
			s.shadowed = !s.allowed && s.rule.Shadow
			s.later = laterAnalytics // a probe: the request was refused already
			c.emitSoon(&c.shards[s.sh], e, now, 0, -1)
			continue
		}
		if s.exact { // the store ran the algorithm: its answer is the status
			res := s.w.SyncAnswer
			s.remaining, s.resetAfter = res.Remaining, res.ResetAfter
			s.never = res.RetryAfter == limiter.Never
			if !s.allowed && !s.never {
				s.retryAfter = res.RetryAfter
			}
			s.shadowed = !s.allowed && s.rule.Shadow
			s.later = laterAnalytics // refunded if another rule refused: counted as answered
			c.emitSoon(&c.shards[s.sh], e, now, 0, -1)
			continue
		}
		if s.skipped { // report it as a peek from memory would
			c.fillView(s, now)
			s.allowed = cost <= s.remaining
			if s.allowed {
				s.remaining -= cost
				if e.kind == counters.KindWindow {
					s.resetAfter = c.windowReset(e, now, true, cost)
				} else {
					s.resetAfter = peek(e, now, cost).ResetAfter
				}
			}
			s.shadowed = !s.allowed && s.rule.Shadow
			s.later = laterRefused
			c.emitSoon(&c.shards[s.sh], e, now, 0, -1)
			continue
		}
		if e.kind == counters.KindWindow {
			c.answerWindow(s, now, cost)
		} else {
			c.answerTAT(s, now, cost)
		}
		if !s.allowed && s.rule.Shadow {
			s.shadowed = true
		}
		c.emitSoon(&c.shards[s.sh], e, now, 0, -1)
	}
}

func (c *Checker) answerWindow(s *slot, now, cost int64) {
	e, res := s.e, s.w.Answer
	if e.cur.start != s.w.Charge.Window { // the window rolled meanwhile: nothing to learn
		if s.charged && e.prev.start == s.w.Charge.Window {
			e.prev.charged += cost // the store counted it in that window
		}
		// the decision still counts: analytics only (its hits are the
		// earlier window's, which the store holds)
		if s.charged {
			p := &e.pendApplied
			p.window = e.cur.start
			p.tally(now, cost, s.allowed, refusalOf(s, false), true)
			if s.allowed {
				p.above(s) // as the status will say
			}
		} else {
			s.later = laterRefused
		}
		return
	}
	var chargedNow int64
	if s.charged {
		chargedNow = cost
	}
	if s.w.Charge.Key != e.skey { // the shared counter of a hot key: its own answer (hot.go)
		e.learnHot(s.w.Charge.Window, res.Total, res.Own, res.Base, res.OwnSync-chargedNow)
	} else {
		e.windowCounter.absorb(chargeAnswer(&res), !e.answered, chargedNow)
	}
	if s.w.Charge.Sliding && e.prev.start == e.cur.start-s.w.Charge.WindowNanos {
		e.prev.total, e.prev.own, e.prev.base, e.prev.known = res.PrevTotal, res.PrevOwn, res.PrevBase, true
	}
	c.learn(e, now, e.curOthers(), e.curMine(), res.Instances)
	e.active, e.stale = false, false // the answer is as fresh as a read
	if s.charged {
		c.countApplied(s, now, cost, s.allowed)
	} else {
		s.later = laterRefused
	}
	v := c.windowView(e, now)
	s.remaining, s.resetAfter = v.remaining, c.windowReset(e, now, false, 0)
	e.answerRemaining, e.sinceAnswer = v.remaining, 0
	if s.charged && s.allowed {
		e.pendApplied.above(s)
	}
	if !s.allowed {
		s.never = cost > v.ceiling
		if !s.never {
			s.retryAfter = c.windowRetry(e, v, now, cost)
		}
		if v.remaining <= 0 {
			e.overUntil = max(e.overUntil, now+int64(s.retryAfter))
		}
		// Within this window the room only shrinks: larger costs are
		// refused from memory until it ends or a refresh says otherwise.
		e.room, e.roomUntil = v.remaining, e.cur.start+int64(s.rule.Window)
	}
}

func (c *Checker) answerTAT(s *slot, now, cost int64) {
	e, res := s.e, s.w.Answer
	g := gcraOf(s.rule)
	a := chargeAnswer(&res)
	if !e.answered {
		var chargedNow int64
		if s.charged {
			chargedNow = cost
		}
		e.rebase(a, chargedNow)
	}
	if s.charged {
		g.AllowAt(&e.gs, now, cost) // own exact view, before the store's raise
		c.countApplied(s, now, cost, true)
	} else {
		s.later = laterRefused
	}
	e.bucketCounter.absorb(a, g, int64(s.rule.Window), s.rule.Limit, now)
	c.learn(e, now, e.bucketCounter.others(), e.bucketCounter.mine(), res.Instances)
	e.active, e.stale = false, false // the answer is as fresh as a read
	probe := peek(e, now, 0)
	s.remaining, s.resetAfter = probe.Remaining, probe.ResetAfter
	e.answerRemaining, e.sinceAnswer = probe.Remaining, 0
	if s.charged {
		e.pendApplied.above(s)
	}
	if !s.allowed {
		if d := peek(e, now, cost); !d.Allowed {
			s.retryAfter, s.never = d.RetryAfter, d.RetryNever()
		}
		if probe.Remaining == 0 {
			e.overUntil = max(e.overUntil, now+int64(s.retryAfter))
		}
		// a bucket's room grows: trust it for one token's time only
		e.room, e.roomUntil = probe.Remaining, now+counters.Span(1, int64(s.rule.Window), s.rule.Limit)
	}
}

// degradedDecision finishes a failed charge under the lock (the failure
// policy decided): what it admitted is counted for the aggregator to add
// later.
func (c *Checker) degradedDecision(s *slot, now, cost int64) {
	e := s.e
	if s.exact {
		// A `mode: sync` counter is the store's own (the exact engine's
		// keys): hits admitted now cannot be added to it later — the
		// aggregator applies deltas to the async counters — so they go to
		// the analytics only, and the counter never holds them.
		s.later = laterAnalytics // counted with the request's answer
		c.fillView(s, now)
		c.emitSoon(&c.shards[s.sh], e, now, 0, -1)
		return
	}
	if s.allowed || s.rule.Algorithm == config.AlgEnvoy {
		c.count(s, now, cost, s.allowed) // unapplied: the aggregator adds it later
		if e.kind == counters.KindTAT && s.allowed {
			gcraOf(s.rule).AllowAt(&e.gs, now, cost)
		}
		s.charged = true
	} else {
		s.later = laterRefused
	}
	c.fillView(s, now)
	if s.charged && s.allowed {
		e.pend.above(s)
	}
	if c.shards[s.sh].markDirty(e) { // counted in memory only: the store needs it soon
		c.dirtyN.Add(1)
	}
}

// fillView sets the slot's remaining and reset from the key's view.
func (c *Checker) fillView(s *slot, now int64) {
	e := s.e
	if e.kind == counters.KindWindow {
		s.remaining, s.resetAfter = c.windowView(e, now).remaining, c.windowReset(e, now, false, 0)
		return
	}
	probe := peek(e, now, 0)
	s.remaining, s.resetAfter = probe.Remaining, probe.ResetAfter
}

// prepareExact readies a `mode: sync` decision that the store runs whole
// (requires the lock).
func (c *Checker) prepareExact(s *slot, req *ratelimit.Request, cost int64) {
	s.need, s.exact = needSync, true
	s.w = c.work(s.w)
	s.w.Sync, s.w.SyncReq = true, counters.SyncRequestFor(s.rule, s.e.key, cost)
	s.w.Charge.ChargeDenied = s.rule.Algorithm == config.AlgEnvoy // Envoy semantics: every call counts
	if req.RequestID != "" {
		s.w.SyncReq.RequestID, s.w.SyncReq.IdempotencyTTL = req.RequestID, c.cfg.IdempotencyTTL
	}
}

// releaseWork returns the store-charge records a Check took.
func (c *Checker) releaseWork(slots []slot) {
	for i := range slots {
		if w := slots[i].w; w != nil {
			c.works.Put(w)
			slots[i].w = nil
		}
	}
}

// syncWork is one store charge of a Check: the operation, and how the
// batcher tells its caller the answer is in.
type syncWork struct {
	counters.Op
	signal   chan uint8
	deadline time.Time
}

// work readies a pooled syncWork for a new charge (w: the slot's, if any).
func (c *Checker) work(w *syncWork) *syncWork {
	if w == nil {
		w = c.works.Get().(*syncWork)
	}
	sig := w.signal
	*w = syncWork{signal: sig}
	return w
}
