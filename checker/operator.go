package checker

import (
	"context"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
)

// The engine's side of package operate (an operator's actions on a
// running checker): the few handles they need. Off the decision path,
// this is the one file that reads or changes a key's entry.

// Now reads the checker's clock: the one it was given, kept within
// Config.MaxClockSkew of the counter store's. Its windows start and its
// controls expire by it.
func (c *Checker) Now() int64 { return c.clock.Now() }

// StoreTimeout is Config.StoreTimeout (defaults applied): the deadline of
// one decision's store calls.
func (c *Checker) StoreTimeout() time.Duration { return c.cfg.StoreTimeout }

// InForce returns the operator controls as of the last read of the
// control store ([Checker.SyncControls]): every control live at that
// read, pool capacities included, in no set order, and how many of them
// the request path matches descriptors against (those the live rules can
// apply). The slice is shared: never modify it.
func (c *Checker) InForce() (list []counters.Control, applied int) {
	if cs := c.controls.Load(); cs != nil {
		return cs.List(), cs.Applied()
	}
	return nil, 0
}

// PoolRule returns the rule a pool of the live rules decides with now:
// its capacity as an operator set it, else as its rule file says.
func (c *Checker) PoolRule(pool *config.Rule) *config.Rule { return c.poolRule(pool) }

// CounterView is this checker's own view of one counter at an instant
// ([Checker.Counter]): what it would decide the next request from, before
// any store read.
type CounterView struct {
	// StoreKey is where this checker's consumption of the counter goes
	// in the store (its own shard of a `shards: N` counter).
	StoreKey string
	// Held says the key table holds the counter (window and bucket
	// counters); of one it does not hold, only StoreKey and Bucket are
	// set.
	Held bool
	// Remaining is what is left before the next request; ResetAfter
	// when the counter resets as it stands: what a request of cost 0
	// would report.
	Remaining  int64
	ResetAfter time.Duration
	// The count as this checker estimates it (a window's, every
	// instance's), its own part, its hits not yet emitted, the
	// other instances' rate (hits per second) and how many instances
	// share the key; refused from memory until OverUntil (0: not over),
	// re-read at NextRefresh (Unix ns).
	Used, Mine, Pending, OthersRate int64
	Instances                       int
	OverUntil, NextRefresh          int64
	// Bucket is the algorithm a bucket counter is decided with, held or
	// not: one the key table does not hold stands as the store's TAT says.
	Bucket limiter.GCRA
}

// Counter returns this checker's view at now of the counter of rule r
// (a limit above 0, mode async or local) for values es, hashed as the
// checker counts them. It charges nothing, records no decision and calls
// no store; a held window counter is first rolled to now, as a decision
// would. A local counter is the in-process limiter's, whose error it
// returns.
func (c *Checker) Counter(r *config.Rule, es []config.Entry, now int64) (CounterView, error) {
	key := string(config.AppendCounterKey(nil, r, es))
	v := CounterView{StoreKey: c.storeKey(key, r)}
	if r.Mode == config.ModeLocal {
		d, err := c.local.PeekAt(c.localKey(key), r.Limiter, now, 0)
		v.Remaining, v.ResetAfter = d.Remaining, d.ResetAfter
		return v, err
	}
	if r.Algorithm.Bucket() {
		v.Bucket = gcraOf(r)
	}
	h := c.counterHash(r, es)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.lookup(h, r, es)
	if e == nil || e.life == lifeGone {
		return v, nil
	}
	v.Held = true
	e.ctr.roll(c, sh, e, now)
	lk := &sh.lk
	e.ctr.look(c, e, now, 0, lk)
	v.Remaining, v.ResetAfter = e.ctr.state(c, e, now, 0)
	v.Used, v.Mine, v.Pending = lk.used, lk.mine, int64(e.pend.Counted)
	v.OthersRate, v.Instances, v.NextRefresh = e.Others, int(e.Instances), e.nextRefresh
	if e.overUntil > now {
		v.OverUntil = e.overUntil
	}
	return v, nil
}

// Forget drops what this checker holds of the counter of rule r for
// values es (hashed) once an operator reset it in the store: all of a
// `mode: local` counter, which lives only here; of any other, what it
// remembers of being over the limit (an evicted key's tombstone too, or
// it would come back refused), and a held key re-reads the store at once,
// within ctx, so that its next decision knows of the reset.
func (c *Checker) Forget(ctx context.Context, r *config.Rule, es []config.Entry) {
	if r.Mode == config.ModeLocal {
		c.local.Reset(c.localKey(string(config.AppendCounterKey(nil, r, es))), r.Limiter)
		return
	}
	now := c.clock.Now()
	h := c.counterHash(r, es)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	sh.tombs.Forget(h)
	e := sh.lookup(h, r, es)
	held := e != nil && e.life != lifeGone
	if held {
		e.overUntil, e.room, e.roomUntil = 0, 0, 0
		if e.life == lifeParked {
			sh.parked.Staled()
		}
		e.active, e.life = true, lifeHeld // a read to make, even of a key nobody uses now
		sh.schedule(e, now)               // learn the reset before the next decision
	}
	sh.mu.Unlock()
	if held {
		c.Refresh(ctx)
	}
}
