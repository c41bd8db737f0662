package checker

import (
	"context"
	"fmt"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/estimate"
	"github.com/velvetrope/velvetrope/internal/rates"
	"github.com/velvetrope/velvetrope/internal/tally"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// A late charge (ratelimit.Request.Charge) is a cost known after the
// response: a delta like any other. Each descriptor's counter takes its
// hits whatever it holds: an async counter counts them in memory and
// emits them at the next flush (a window past its limit, a bucket's TAT
// past its burst: the next decision sees no room, here at once and on
// the other checkers once the store has them); a `mode: sync` counter is
// charged in the store, forced; a `mode: local` one in the limiter.
// Nothing is refused, and no pool lends: a charge past an elastic rule's
// limit is its own counter's debt.

// lateCounted says s takes a late charge: a limited counter of its own
// (an unlimited or blocking rule, a repeated descriptor, a pool and a
// concurrency rule, whose leases are requests in flight, take none). A
// charge of nothing counts nothing and reports the counter.
func lateCounted(s *slot) bool {
	r := s.rule
	return s.dupOf < 0 && s.role != rolePool && r != nil && !r.Unlimited && r.Limit > 0 && r.Algorithm != config.AlgConcurrency
}

// late counts a charge after the response (Check's for Request.Charge).
// The store's counters are charged first, no lock held: if the store
// fails, nothing at all is counted and the error says so, so that the
// caller can retry the charge (with its request id, a `mode: sync`
// counter the store charged is not charged twice).
func (c *Checker) late(ctx context.Context, p *pass, req *ratelimit.Request) error {
	for i := range p.slots {
		s := &p.slots[i]
		if !lateCounted(s) || s.rule.Mode != config.ModeSync {
			continue
		}
		s.need = needExact
		s.w = c.work(s.w)
		q := counters.SyncRequestFor(s.rule, string(config.AppendCounterKey(nil, s.rule, s.entriesOf(req))), s.cost)
		q.Force = true
		if req.RequestID != "" {
			q.RequestID, q.IdempotencyTTL = req.RequestID, c.cfg.IdempotencyTTL
		}
		s.w.Sync, s.w.SyncReq = true, q
		c.Stats.SyncCharges.Add(1)
		if c.call(s.w, p.now); s.w.Err != nil {
			err := s.w.Err
			c.releaseWork(p.slots)
			c.Stats.LateFailed.Add(1)
			return fmt.Errorf("checker: charge of rule %s: %w (nothing was counted; retry the charge)", s.rule.ID, err)
		}
	}
	c.lock(p.locks)
	counted := false
	for i := range p.slots {
		s := &p.slots[i]
		s.allowed = true
		if !lateCounted(s) {
			if s.dupOf < 0 {
				s.need = needNone
			}
			continue
		}
		sh := &c.shards[s.sh]
		e := c.entryFor(sh, s, req, p.now, false)
		cost := s.cost
		s.charged, counted = true, counted || cost > 0
		switch s.rule.Mode {
		case config.ModeSync:
			a := &s.w.SyncAnswer
			s.remaining, s.resetAfter = a.Remaining, a.ResetAfter
			tallyLate(&e.pendApplied, req, p.now, cost) // the store holds it: analytics only
		case config.ModeLocal:
			s.need = needLocal
			ld, _ := c.local.ForceAt(s.key, s.rule.Limiter, p.now, cost, "")
			s.remaining, s.resetAfter = ld.Remaining, max(ld.ResetAfter, 0)
			tallyLate(&e.pendApplied, req, p.now, cost)
		default:
			s.need = needMemory
			tallyLate(&e.pend, req, p.now, cost)
			c.countHits(e, p.now, e.ctr.force(e, p.now, cost)) // what the store must add: a bucket's debt is bounded
			s.remaining, s.resetAfter = e.ctr.state(c, e, p.now, 0)
		}
		c.emitSoon(sh, e, p.now, 0, -1) // due at the next flush: the others must learn of it
	}
	c.unlock(p.locks)
	c.releaseWork(p.slots)
	if counted && !req.Report { // as the analytics count it: a charge that counted something (a report is decisions)
		c.Stats.Late.Add(1)
	}
	p.code, p.late = ratelimit.OK, true
	return nil
}

// fillView fills v with what s, a probe's first descriptor, knows of its
// counter (Request.View; requires the locks).
func (c *Checker) fillView(p *pass, v *ratelimit.QuotaView) {
	*v = ratelimit.QuotaView{}
	if p.n == 0 {
		return
	}
	s := &p.slots[0]
	if s.rule == nil || s.rule.Unlimited || s.need == needNone || s.e == nil {
		return
	}
	var st ratelimit.Status
	c.status(&st, s, p.denied, p.now)
	e := s.e
	*v = ratelimit.QuotaView{Known: true, Remaining: st.Remaining, ResetAfter: st.ResetAfter, Window: !s.rule.Algorithm.Bucket(),
		Fleet: c.fleet(e), Own: e.Own, Others: e.Others, InFlight: e.InFlight(c.cfg.PipelineLag)}
}

// tallyLate counts a late charge for the analytics: as late, or as a quota
// report's decisions (Request.Report).
func tallyLate(p *tally.Pending, req *ratelimit.Request, now, cost int64) {
	if req.Report {
		p.Report(now, cost, req.Denied)
		return
	}
	p.Late(now, cost)
}

// force takes a late charge's hits whole: a window's count has no bound
// that matters (it is forgotten at the window's end).
func (w *windowCounter) force(_ *entry, _, cost int64) int64 { return cost }

// force moves the bucket's TAT by the late charge's hits, past its burst
// if need be (limiter.Force, whose debt is bounded), and returns the hits
// the TAT moved by: what the store's bucket adds, so that its own TAT
// (tat + the hits' span) stays within the same bound.
func (b *bucketCounter) force(e *entry, now, cost int64) int64 {
	g := estimate.GCRA(e.rule)
	before := max(g.TAT(&b.State), now)
	g.Force(&b.State, now, cost)
	moved := g.TAT(&b.State) - before
	if moved <= 0 {
		return 0
	}
	return min(cost, rates.MulDiv(moved, e.rule.Limit, int64(e.rule.Window)))
}
