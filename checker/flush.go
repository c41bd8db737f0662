package checker

import (
	"context"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// flushBatch is the most deltas handed to the producer in one call.
const flushBatch = 2048

func (c *Checker) flushLoop() {
	c.every(c.cfg.FlushInterval, c.flushNow, 10*time.Second, func(ctx context.Context) {
		if err := c.Flush(ctx); err != nil {
			c.logFlush.Warn("emitting deltas failed; they stay buffered and are retried", "error", err,
				"buffered", len(c.buffered))
		}
	})
}

// every runs fn every interval (and whenever wake fires) until Stop, each
// run with its own timeout.
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

// Flush emits every pending delta now. Deltas the producer refuses stay
// buffered, in order, ahead of later ones; while MaxBuffered deltas wait,
// consumption keeps aggregating in the key table instead (memory bounded
// by the keys, not by traffic), so nothing counted is ever dropped.
func (c *Checker) Flush(ctx context.Context) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	deltas := c.buffered
	fresh := len(deltas)
	if len(deltas) < c.cfg.MaxBuffered {
		for i := range c.shards {
			sh := &c.shards[i]
			sh.mu.Lock()
			// Orphans first: they were built before the deltas built now,
			// and a key's deltas must carry their minute usage in sequence
			// order (the newest sequence's row wins in the analytics).
			deltas = append(deltas, sh.orphans...)
			sh.orphans = nil
			for _, e := range sh.dirty {
				if !e.gone {
					deltas = c.appendDeltas(deltas, e)
				}
				e.dirty = false
			}
			clear(sh.dirty)
			sh.dirty = sh.dirty[:0]
			sh.mu.Unlock()
		}
		c.dirtyN.Store(0)
	}
	// Sequences are assigned in the order of production, so that per
	// partition they only grow: the aggregator drops anything not above
	// the highest sequence it applied.
	for _, d := range deltas[fresh:] {
		d.Sequence = c.seq.Add(1)
	}
	c.Stats.Flushes.Add(1)
	for len(deltas) > 0 {
		n := min(len(deltas), flushBatch)
		if err := c.prod.Produce(ctx, deltas[:n]); err != nil {
			c.Stats.EmitErrors.Add(1)
			c.buffered = deltas
			return err
		}
		c.Stats.DeltasEmitted.Add(uint64(n))
		now := c.clock.Now()
		for _, d := range deltas[:n] {
			if d.FirstUnixNanos > 0 {
				c.Stats.EmitLatency.Observe(time.Duration(now - d.FirstUnixNanos))
			}
		}
		deltas = deltas[n:]
	}
	c.buffered = nil
	return nil
}

// appendDeltas moves e's pending consumption into deltas (requires the
// shard lock).
func (c *Checker) appendDeltas(deltas []*eventsv1.Delta, e *entry) []*eventsv1.Delta {
	if e.pendOld.used {
		own := int64(0)
		if e.answered && e.prev.start == e.pendOld.window {
			own = e.prev.emitted
		}
		deltas = append(deltas, c.delta(e, &e.pendOld, false, own))
		e.pendOld = pending{}
	}
	// own_after only once the store has told us our part (a key created
	// again counts from zero until then, and the counter adds all of it)
	own := int64(0)
	if e.answered {
		own = e.cum
		if e.kind == counters.KindWindow {
			own = e.cur.emitted
		}
	}
	if e.pendApplied.used {
		deltas = append(deltas, c.delta(e, &e.pendApplied, true, own))
		e.pendApplied = pending{}
	}
	if e.pend.used {
		deltas = append(deltas, c.delta(e, &e.pend, false, own))
		e.pend = pending{}
	}
	return deltas
}

// drain moves a departing entry's pending consumption to the shard's
// orphans (requires the shard lock).
func (c *Checker) drain(sh *shard, e *entry) {
	sh.orphans = c.appendDeltas(sh.orphans, e)
	e.dirty = false
}

// delta builds the wire delta of one pending slot (Sequence is set when
// it is produced).
func (c *Checker) delta(e *entry, p *pending, applied bool, ownAfter int64) *eventsv1.Delta {
	r := e.rule
	d := &eventsv1.Delta{
		InstanceId: c.instance, Domain: r.Domain, RuleId: r.ID, DescriptorText: e.desc, CounterKey: e.skey,
		Algorithm: string(r.Algorithm), WindowNanos: int64(r.Window), Limit: r.Limit,
		AllowedCount: p.allowedCount, AllowedCost: p.allowedCost, DeniedCount: p.deniedCount,
		DeniedCost: p.deniedCost, DeferredCount: p.deferred, ShadowDeniedCount: p.shadowDenied,
		CountedCost: p.counted, AlreadyApplied: applied, FirstUnixNanos: p.first, LastUnixNanos: p.last,
		OwnAfter: uint64(max(ownAfter, 0)), Minute: e.usage.add(p),
	}
	if e.kind == counters.KindWindow {
		d.WindowStartUnixNanos = p.window
	} else {
		g := gcraOf(r)
		d.RateTokens, d.Burst, d.TatAfterUnixNanos = r.Limit, g.Burst, g.TAT(&e.gs)
	}
	return d
}

// count records consumption decided in memory (requires the lock): to the
// own counters, and to the pending delta.
func (c *Checker) count(e *entry, now, cost int64, allowed, charge bool) {
	p := &e.pend
	p.window = e.cur.start
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

// countApplied records consumption the store already applied (a charge).
func (c *Checker) countApplied(e *entry, now, cost int64, allowed bool) {
	e.observe(now, cost)
	p := &e.pendApplied
	p.window = e.cur.start // roll() emitted any earlier window's charges
	if e.kind == counters.KindWindow {
		e.cur.charged += cost
	} else {
		e.cumCharged += cost
	}
	p.tally(now, cost, allowed)
	p.counted += uint64(cost)
}

// countDenied records a refusal that charged nothing (analytics only).
func (c *Checker) countDenied(e *entry, now, cost int64) {
	p := &e.pend
	p.window = e.cur.start
	p.add(now)
	p.deniedCount++
	p.deniedCost += uint64(cost)
}

// countAnalytics records a decision the store applied itself (`mode:
// sync`): emitted as already applied, for analytics only.
func (c *Checker) countAnalytics(e *entry, now, cost int64, allowed bool) {
	p := &e.pendApplied
	p.window = e.cur.start
	p.tally(now, cost, allowed)
}

// pending is consumption counted but not yet flushed, for one window.
type pending struct {
	window                          int64 // its start (window counters; buckets ignore it)
	allowedCount, allowedCost       uint64
	deniedCount, deniedCost         uint64
	shadowDenied, deferred, counted uint64
	first, last                     int64
	used                            bool
}

func (p *pending) add(now int64) {
	if !p.used {
		p.used, p.first = true, now
	}
	p.last = max(p.last, now)
}

// tally adds one decision of cost hits to p.
func (p *pending) tally(now, cost int64, allowed bool) {
	p.add(now)
	if allowed {
		p.allowedCount++
		p.allowedCost += uint64(cost)
	} else {
		p.deniedCount++
		p.deniedCost += uint64(cost)
	}
}

// minuteUsage is an entry's usage in its current analytics minute.
type minuteUsage struct {
	stream                    uint64 // unique per entry of this checker
	minute                    int64  // unix seconds; 0: none yet
	allowedCount, allowedCost uint64
	deniedCount, deniedCost   uint64
	deferred, shadowDenied    uint64
}

// add folds p into the usage of its minute (never going back to an
// earlier one) and returns the cumulative row a delta carries.
func (u *minuteUsage) add(p *pending) *eventsv1.MinuteUsage {
	t := p.first
	if t == 0 {
		t = p.last
	}
	m := max(t/1e9/60*60, u.minute)
	if m != u.minute {
		*u = minuteUsage{stream: u.stream, minute: m}
	}
	u.allowedCount += p.allowedCount
	u.allowedCost += p.allowedCost
	u.deniedCount += p.deniedCount
	u.deniedCost += p.deniedCost
	u.deferred += p.deferred
	u.shadowDenied += p.shadowDenied
	return &eventsv1.MinuteUsage{MinuteUnix: u.minute, Stream: u.stream, AllowedCount: u.allowedCount,
		AllowedCost: u.allowedCost, DeniedCount: u.deniedCount, DeniedCost: u.deniedCost,
		DeferredCount: u.deferred, ShadowDeniedCount: u.shadowDenied}
}
