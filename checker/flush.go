package checker

import (
	"context"
	"time"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/tally"
)

func (c *Checker) flushLoop() {
	c.every(c.cfg.FlushInterval, c.flushNow, 10*time.Second, func(ctx context.Context) {
		if err := c.flush(ctx, false); err != nil {
			c.logFlush.Warn("emitting deltas failed; they stay buffered and are retried", "error", err,
				"buffered", c.out.Held())
		}
	})
}

// every runs fn every interval and when wake fires, until Stop, each run
// with its own timeout.
func (c *Checker) every(interval time.Duration, wake <-chan struct{}, timeout time.Duration, fn func(context.Context)) {
	defer c.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-wake:
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		fn(ctx)
		cancel()
	}
}

// emitSoon queues e's pending consumption, cost more hits to come, as
// docs/design.md's "Emission in proportion to need" says (requires the
// lock): lazy while it holds at most room / (2 × instances) (room: the far
// band's margin, -1: not far) and the held bounds, else due at the next flush.
func (c *Checker) emitSoon(sh *shard, e *entry, now, cost, room int64) {
	if e.emit == emitDue {
		return // due at the next flush already
	}
	// held > room / (2 × instances), without a division on the request path
	held := int64(e.pend.Counted) + cost
	if held > 0 && (room < 0 || held*2*max(c.fleet(e), int64(e.Instances)) > room || held > c.cfg.MaxHeldHits ||
		sh.held+cost > c.heldPerShard) || c.slots == 0 {
		if sh.markDirty(e) {
			c.dirtyN.Add(1)
		}
		return
	}
	if e.emit == emitLazy {
		return // keeps its turn
	}
	// by the end of its minute and window: one delta each
	due := min(now+int64(c.cfg.MaxEmitInterval), (now/int64(time.Minute)+1)*int64(time.Minute)-1)
	_, end := e.ctr.window(e.rule)
	due = min(due, end-1)
	f := int64(c.cfg.FlushInterval)
	sh.markLazy(e, max((due+f-1)/f, now/f+1), c.slots) // the first flush at or after due
}

// Flush emits every pending delta now, lazy ones included. Those the
// producer refuses stay buffered, in order; while MaxBuffered wait, the key
// table aggregates instead (bounded by keys, not traffic): none is dropped.
func (c *Checker) Flush(ctx context.Context) error { return c.flush(ctx, true) }

// flush emits the keys queued for it and the lazy keys whose tick has
// come (all of them with all).
func (c *Checker) flush(ctx context.Context, all bool) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	var deltas []*eventsv1.Delta
	if !c.out.Full() {
		tick := c.clock.Now() / int64(c.cfg.FlushInterval)
		from := max(c.lastTick+1, tick-int64(c.slots)+1)
		if all {
			from = tick - int64(c.slots) + 1
		}
		// compact keys' decisions every few flushes: a flush sends a record
		// per partition that has deltas, and at a per-IP front nearly every
		// decision is a compact key's (their hits wait no longer than a far
		// key's may: every charge reserves them)
		// (or the clock went back: they wait for no later turn)
		fresh := all || tick >= c.nextFresh || tick < c.nextFresh-c.freshEvery
		if fresh {
			c.nextFresh = tick + c.freshEvery
		}
		for i := range c.shards {
			sh := &c.shards[i]
			sh.mu.Lock()
			// orphans first: a key's minute usage must go in sequence
			// order (the newest sequence's row wins in the analytics)
			deltas = append(deltas, sh.orphans...)
			sh.orphans = nil
			if fresh {
				deltas = c.appendFresh(deltas, sh) // (before an entry that adopted a record's)
			}
			for _, e := range sh.dirty {
				if e.life != lifeGone && e.emit == emitDue {
					deltas = c.appendDeltas(deltas, e)
					e.emit = emitClean
				}
			}
			clear(sh.dirty)
			sh.dirty = sh.dirty[:0]
			for t := from; t <= tick; t++ {
				deltas = c.flushSlot(deltas, sh, t, tick, all)
			}
			sh.mu.Unlock()
		}
		c.dirtyN.Store(0)
		c.lastTick = tick
	}
	c.Stats.Flushes.Add(1)
	return c.out.Send(ctx, deltas, c.clock.Now)
}

// flushSlot emits the lazy entries of tick t's place due by tick (all:
// every one), keeping those of a later turn (requires the shard lock).
func (c *Checker) flushSlot(deltas []*eventsv1.Delta, sh *shard, t, tick int64, all bool) []*eventsv1.Delta {
	sh.wheel.Turn(t, func(e *entry) bool {
		switch {
		case e.emit != emitLazy || !sh.wheel.Same(e.lazyTick, t):
			return false // a stale place: promoted, emitted or queued elsewhere since
		case e.lazyTick > tick && !all:
			return true // a later turn of the wheel (the clock went back)
		}
		sh.unlazy(e)
		if e.life != lifeGone {
			deltas = c.appendDeltas(deltas, e)
		}
		return false
	})
	return deltas
}

// appendDeltas moves e's pending consumption into deltas (requires the lock).
func (c *Checker) appendDeltas(deltas []*eventsv1.Delta, e *entry) []*eventsv1.Delta {
	// own_after only once the store told us our part or the entry holds
	// all of it (a key created again counts from zero until then, and the
	// counter adds all of it)
	own := int64(0)
	if c.ownKnown(e) {
		own = e.ctr.mineMemory()
	}
	if e.pendApplied.Used() {
		deltas = append(deltas, c.delta(e, &e.pendApplied, true, own))
		e.pendApplied = tally.Pending{}
	}
	if e.pend.Used() {
		deltas = append(deltas, c.delta(e, &e.pend, false, own))
		e.pend = tally.Pending{}
	}
	return deltas
}

// drain moves a departing entry's pending consumption to the orphans.
func (c *Checker) drain(sh *shard, e *entry) {
	if e.emit == emitLazy {
		sh.unlazy(e)
	}
	sh.orphans = c.appendDeltas(sh.orphans, e)
	e.emit = emitClean
}

// delta builds the wire delta of p (Sequence is set when produced).
func (c *Checker) delta(e *entry, p *tally.Pending, applied bool, ownAfter int64) *eventsv1.Delta {
	r := e.rule
	alg := r.Algorithm
	if r.Limit == 0 {
		// a blocked counter's entry counts refusals only (analytics, a window)
		applied = true
		if alg.Bucket() {
			alg = config.AlgFixedWindow
		}
	}
	d := &eventsv1.Delta{
		InstanceId: c.instance, Domain: r.Domain, RuleId: r.ID, DescriptorText: e.desc, CounterKey: e.skey,
		Algorithm: string(alg), WindowNanos: int64(r.Window), Limit: r.Limit,
		AlreadyApplied: applied, OwnAfter: uint64(max(ownAfter, 0)),
	}
	p.Fill(d, &e.usage)
	e.ctr.fillDelta(e, d)
	return d
}

// count records consumption decided in memory in the counter and the
// pending delta (requires the lock); an Envoy refusal counts as decided.
func (c *Checker) count(s *slot, now, cost int64, allowed bool) {
	if s.quiet {
		return
	}
	e := s.e
	e.pend.Tally(now, cost, allowed, refusalOf(s, false), true)
	c.countHits(e, now, cost)
}

// countHits counts hits the counter must add, pending emission (requires
// the lock).
func (c *Checker) countHits(e *entry, now, cost int64) {
	p := &e.pend
	e.Observe(now, cost)
	p.Counted += uint64(cost)
	if e.emit == emitLazy { // held back (emitSoon bounds it)
		c.shards[e.hash&c.mask].held += cost
	}
	e.sinceAnswer += cost
	if e.x != nil {
		e.x.Spent += cost
	}
	e.ctr.addMemory(cost)
}

// countApplied records a charge the store applied in the pending delta.
func (c *Checker) countApplied(s *slot, now, cost int64, allowed bool) {
	if s.quiet {
		return
	}
	e := s.e
	e.Observe(now, cost)
	p := &e.pendApplied
	p.Tally(now, cost, allowed, refusalOf(s, false), true)
	p.Counted += uint64(cost)
}

// countRefused records a refusal that charged nothing, as its caller was
// answered (refusalOf); a pool that had room neither lent nor refused.
func (c *Checker) countRefused(s *slot, e *entry, now, cost int64, deferred bool) {
	if s.quiet {
		return
	}
	if s.role == rolePool && s.allowed {
		return
	}
	e.pend.Tally(now, cost, false, refusalOf(s, deferred), false)
}

// countAnalytics records a decision the counters already hold (`mode:
// sync`: the store's; `mode: local`: the limiter's), for the analytics.
func (c *Checker) countAnalytics(s *slot, now, cost int64, allowed, deferred bool) {
	if s.quiet {
		return
	}
	p := &s.e.pendApplied
	p.Tally(now, cost, allowed, refusalOf(s, deferred), false)
	if allowed {
		above(p, s)
	}
}

// countLater is a slot's tally (of no hits) that waits for the request's
// answer: a refusal counts as the caller was answered (commit).
type countLater uint8

const (
	laterNone      countLater = iota
	laterRefused              // countRefused
	laterAnalytics            // countAnalytics of a `mode: sync` decision, as the caller was answered
)

// above records that an admission of s tallied in p went above its own
// limit: borrowing, or into a soft overage (Status.Elastic, OverSoft).
func above(p *tally.Pending, s *slot) {
	switch {
	case s.role == roleRelease: // no decision counted, none above
	case s.rule.Pool != nil:
		if s.borrows() {
			p.Elastic++
		}
	case overSoft(s.rule, s.remaining):
		p.OverSoft++
	}
}

// overSoft: remaining (against r's ceiling) lies in a soft overage.
func overSoft(r *config.Rule, remaining int64) bool {
	over := r.Ceiling() - r.Limit
	return r.Pool == nil && over > 0 && remaining < over
}

// refusalOf is how s's refusal counts: a shadow rule's own is
// shadow-denied, any other as the request was answered (deferred or
// denied; a deferring rule's too when the request was denied).
func refusalOf(s *slot, deferred bool) tally.Refusal {
	switch {
	case s.role == roleRelease:
		return tally.Release
	case s.rule.Shadow && !s.allowed:
		return tally.Shadow
	case deferred:
		return tally.Deferred
	}
	return tally.Denied
}
