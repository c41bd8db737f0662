package checker

import (
	"context"
	"fmt"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/breaker"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// prepareCharge readies a near-band store charge (requires the lock).
func (c *Checker) prepareCharge(s *slot, now, cost int64) {
	e, r := s.e, s.rule
	s.need = needCharge
	budget := e.answerRemaining
	if budget < 0 {
		budget = r.Capacity()
	}
	s.w = c.work(s.w)
	s.w.budgetOK = e.sinceAnswer+cost <= budget/c.fleet(e) // this instance's share
	q := &s.w.Charge
	*q = counters.ChargeRequest{Key: e.skey, Kind: e.ctr.kind(), Instance: c.instance, Now: now, Cost: cost,
		WindowNanos: int64(r.Window)}
	e.ctr.fillCharge(c, e, q)
	s.w.staleFleet = c.reserveFirstTouch(e, q, now)
}

// charge makes the readied store calls, no lock held, and reports whether
// the request is refused: Envoy rules are charged whatever happens,
// algorithm rules while it stands (refunded if a later one refuses).
func (c *Checker) charge(slots []slot, denied bool, req *ratelimit.Request, now int64) bool {
	for i := range slots {
		s := &slots[i]
		if s.role == rolePool && !denied {
			// the borrowers before it have their answers: the pool pays by them
			c.redecidePool(s, slots, req, now)
			if !s.allowed && s.need == needMemory && !s.shadowed {
				denied = true
			}
		}
		if !s.stored() {
			continue
		}
		cost := s.cost
		if denied && !s.w.Charge.ChargeDenied { // already refused: not worth a charge
			s.call = callSkipped
			if s.need == needExact { // only the store knows it: probe for the status
				s.w.SyncReq.Cost, s.w.SyncReq.RequestID = 0, ""
				c.call(s.w, now)
			}
			continue
		}
		if cost > s.rule.Capacity() && !s.w.Charge.ChargeDenied { // can never fit: no call
			s.allowed, s.never, s.shadowed = false, true, s.rule.Shadow
			denied = denied || !s.rule.Shadow
			continue
		}
		c.Stats.SyncCharges.Add(1)
		if s.need == needCharge && s.w.staleFleet && !c.hearFleet(now, &s.w.Charge) {
			// a newcomer's allowance may be missing from the reservation
			s.w.Err = errStaleFleet
		} else {
			c.call(s.w, now)
		}
		switch {
		case s.w.Err != nil:
			c.failurePolicy(s, now, cost)
		case s.need == needExact:
			s.allowed, s.charged = s.w.SyncAnswer.Allowed, s.w.SyncAnswer.Allowed || s.w.Charge.ChargeDenied
		default:
			s.allowed, s.charged = s.w.Answer.Allowed, s.w.Answer.Allowed || s.w.Charge.ChargeDenied
			if s.rule.Pool != nil && s.allowed {
				s.setAbove(s.w.Answer.Total, cost) // by the store's count, not this view
			}
		}
		if !s.allowed && !s.rule.Shadow {
			denied = true
		}
	}
	if denied {
		c.refund(slots)
	}
	return denied
}

// call makes one store call through the batcher, unless the breaker is
// open (w.Err says so).
func (c *Checker) call(w *syncWork, now int64) {
	var probe bool
	if probe, w.Err = c.admit(now); w.Err == nil {
		c.batch.Do(&w.Call, c.cfg.StoreTimeout)
		c.brk.Done(now, w.Err, probe)
	}
}

// refund takes back a refused request's charges of algorithm rules.
func (c *Checker) refund(slots []slot) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StoreTimeout)
	defer cancel()
	for i := range slots {
		s := &slots[i]
		if !s.stored() || s.w.Err != nil || !s.charged || s.w.Charge.ChargeDenied {
			continue
		}
		c.Stats.Refunds.Add(1)
		if s.need == needExact {
			q := s.w.SyncReq
			s.charged = c.store.RefundSync(ctx, &q, s.w.SyncAnswer.Token) != nil
		} else if q := s.w.Charge; c.store.Refund(ctx, &q) == nil {
			s.charged = false
			s.w.Answer.Refunded(&q) // the answer counted it in
		}
	}
}

// redecidePool decides a pool slot again, its shard locked for that
// alone, when its borrowers' store answers changed what they borrow.
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

// admit asks the breaker whether a store call may go out now; probe: it
// is the half-open probe.
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
	s.call = callFailed
	c.Stats.Degraded.Add(1)
	c.Stats.StoreErrors.Add(1)
	c.logStore.Warn("counter store unavailable; applying failure policies", "rule", s.rule.ID, "policy", s.rule.Failure, "error", s.w.Err)
	switch s.rule.Failure {
	case config.FailClosed:
		s.allowed = false
	case config.FailLocalBudget:
		s.allowed = s.w.budgetOK
	default: // open
		s.allowed = true
	}
}

// applyCharges records the store's answers (requires the locks).
func (c *Checker) applyCharges(slots []slot, now int64) {
	for i := range slots {
		s := &slots[i]
		if !s.stored() || s.e == nil || s.e.life == lifeGone {
			continue
		}
		switch {
		case s.w.Err != nil:
			c.degradedDecision(s, now, s.cost)
		case s.need == needExact:
			c.answerExact(s)
		case s.call == callSkipped: // report it as a peek from memory would
			s.remaining, s.resetAfter = s.e.ctr.state(c, s.e, now, 0)
			if s.allowed = s.cost <= s.remaining; s.allowed {
				s.remaining -= s.cost
				_, s.resetAfter = s.e.ctr.state(c, s.e, now, s.cost)
			}
			s.shadowed = !s.allowed && s.rule.Shadow
			s.later = laterRefused
		default:
			c.answerCharge(s, now)
			if !s.allowed && s.rule.Shadow {
				s.shadowed = true
			}
		}
		if s.w.Err == nil {
			c.emitSoon(&c.shards[s.sh], s.e, now, 0, -1)
		}
	}
}

// answerExact reports a `mode: sync` decision the store ran whole; a
// probe (the request refused already) as the exact engine's peek would.
// Its analytics wait for the request's answer.
func (c *Checker) answerExact(s *slot) {
	res, cost := s.w.SyncAnswer, s.cost
	s.remaining, s.resetAfter = res.Remaining, res.ResetAfter
	if s.call == callSkipped {
		s.never = cost > s.rule.Capacity()
		s.allowed = !s.never && cost <= res.Remaining
		if s.allowed {
			s.remaining -= cost
		} else if s.never {
			s.remaining = 0
		}
	} else {
		s.never = res.RetryAfter == limiter.Never
		if !s.allowed && !s.never {
			s.retryAfter = res.RetryAfter
		}
		if s.allowed {
			s.lease = res.Token // a concurrency rule's; copied: the work goes back to its pool
		}
	}
	s.shadowed = !s.allowed && s.rule.Shadow
	s.later = laterAnalytics
}

// answerCharge takes in a near-band charge's answer: the counter learns
// from it, the status reports it, a refusal says how long the key is over.
func (c *Checker) answerCharge(s *slot, now int64) {
	e, cost := s.e, s.cost
	l := e.ctr.absorbCharge(c, e, now, &s.w.Charge, &s.w.Answer, cost, s.charged, s.allowed)
	if l.rolled {
		// analytics only: its hits are the earlier window's, in the store
		if s.charged && !s.quiet {
			p := &e.pendApplied
			p.Tally(now, cost, s.allowed, refusalOf(s, false), true)
			if s.allowed {
				above(p, s) // as the status will say
			}
		} else {
			s.later = laterRefused
		}
		return
	}
	e.active, e.stale = false, false // the answer is as fresh as a read
	if s.charged {
		c.countApplied(s, now, cost, s.allowed)
	} else {
		s.later = laterRefused
	}
	s.remaining, s.resetAfter = l.remaining, l.resetAfter
	e.answerRemaining, e.sinceAnswer = l.remaining, 0
	if s.charged && s.allowed {
		above(&e.pendApplied, s)
	}
	if !s.allowed {
		s.never, s.retryAfter = l.never, l.retryAfter
		if l.remaining <= 0 {
			e.overUntil = max(e.overUntil, now+int64(s.retryAfter))
		}
		// larger costs are refused from memory while the room is trusted
		e.room, e.roomUntil = l.remaining, l.roomUntil
	}
}

// degradedDecision finishes a charge the failure policy decided (under
// the lock): what it admitted is counted for the aggregator to add.
func (c *Checker) degradedDecision(s *slot, now, cost int64) {
	e := s.e
	if s.need == needExact {
		// a `mode: sync` counter is the exact engine's, which no delta
		// reaches: what it admits now goes to the analytics only
		s.later = laterAnalytics // counted with the request's answer
		s.remaining, s.resetAfter = e.ctr.state(c, e, now, 0)
		c.emitSoon(&c.shards[s.sh], e, now, 0, -1)
		return
	}
	if s.allowed || s.rule.Algorithm == config.AlgEnvoy {
		c.count(s, now, cost, s.allowed) // unapplied: the aggregator adds it later
		if s.allowed {
			e.ctr.admit(e, now, cost, limiter.State{}, false)
		}
		s.charged = true
	} else {
		s.later = laterRefused
	}
	s.remaining, s.resetAfter = e.ctr.state(c, e, now, 0)
	if s.charged && s.allowed {
		above(&e.pend, s)
	}
	if c.shards[s.sh].markDirty(e) { // counted in memory only: the store needs it soon
		c.dirtyN.Add(1)
	}
}

// prepareExact readies a `mode: sync` decision the store runs whole.
func (c *Checker) prepareExact(s *slot, req *ratelimit.Request, cost, now int64) {
	s.need = needExact
	s.w = c.work(s.w)
	s.w.Sync, s.w.SyncReq = true, counters.SyncRequestFor(s.rule, s.e.key, cost)
	if c.ft.joined.Load() > 0 {
		// clamped to the store's since the first heartbeat: its plain
		// commands' windows are this clock's (before it, the scripts' TIME)
		s.w.SyncReq.Clock = now
	}
	s.w.Charge.ChargeDenied = s.rule.Algorithm == config.AlgEnvoy         // Envoy semantics: every call counts
	if req.RequestID != "" && s.rule.Algorithm != config.AlgConcurrency { // a lease is no answer to replay: it may be gone
		s.w.SyncReq.RequestID, s.w.SyncReq.IdempotencyTTL = req.RequestID, c.cfg.IdempotencyTTL
	}
	if s.rule.Algorithm == config.AlgConcurrency && cost > 0 {
		if c.rules.Load().IsStaged(req.Domain) {
			// a staged rule's answer is thrown away: nobody would release
			// its lease, so it only asks
			s.w.SyncReq.Cost = 0
		} else {
			s.w.SyncReq.Lease = ratelimit.NewLease(s.e.key)
		}
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

// syncWork is one store call of a Check, sent through the batcher.
type syncWork struct {
	counters.Call
	budgetOK   bool // within local_budget's share, should the store fail
	staleFleet bool // the registry's list is too old to reserve every allowance by
}

// work readies a pooled syncWork (w: the slot's, if any).
func (c *Checker) work(w *syncWork) *syncWork {
	if w == nil {
		w = c.works.Get().(*syncWork)
	}
	w.Call.Reset()
	w.budgetOK, w.staleFleet = false, false
	return w
}
