package checker

import (
	"context"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/estimate"
	"github.com/velvetrope/velvetrope/limiter"
)

// The engine's side of package operate (an operator's actions on a
// running checker): off the decision path, the one file that reads or
// changes a key's entry for them.

// Now reads the checker's clock, kept within MaxClockSkew of the store's:
// its windows start and its controls expire by it.
func (c *Checker) Now() int64 { return c.clock.Now() }

// StoreTimeout is the deadline of one decision's store calls.
func (c *Checker) StoreTimeout() time.Duration { return c.cfg.StoreTimeout }

// InForce returns the controls live at the last read of the control store
// ([Checker.SyncControls]), pool capacities included, and how many the
// live rules apply. The slice is shared: never modify it.
func (c *Checker) InForce() (list []counters.Control, applied int) {
	cs := c.ctl.Current()
	return cs.List(), cs.Applied()
}

// PoolRule returns the rule a pool decides with now: its capacity as an
// operator set it, else as its rule file says.
func (c *Checker) PoolRule(pool *config.Rule) *config.Rule { return c.ctl.Current().PoolRule(pool) }

// CounterView is this checker's view of one counter ([Checker.Counter]):
// what it would decide the next request from, before any store read.
type CounterView struct {
	StoreKey string // where this checker's consumption goes (its shard of a hot key)
	// Held says the key table holds the counter; if not, only StoreKey
	// and Bucket are set.
	Held bool
	// Remaining and ResetAfter are what a request of cost 0 would report.
	Remaining  int64
	ResetAfter time.Duration
	// The count as estimated (a window's, all instances'), its own part,
	// its hits not yet emitted, the others' hits per second, the instances
	// sharing it; over until OverUntil (0: not), re-read at NextRefresh.
	Used, Mine, Pending, OthersRate int64
	Instances                       int
	OverUntil, NextRefresh          int64
	Bucket                          limiter.GCRA // a bucket counter's algorithm, held or not
}

// Counter returns this checker's view at now of rule r's counter (a limit
// above 0, mode async or local) for values es, hashed as it counts them.
// It charges nothing and calls no store; a held window counter is rolled
// to now, as a decision would. A local counter's error is the limiter's.
func (c *Checker) Counter(r *config.Rule, es []config.Entry, now int64) (CounterView, error) {
	key := string(config.AppendCounterKey(nil, r, es))
	v := CounterView{StoreKey: c.storeKey(key, r)}
	if r.Mode == config.ModeLocal {
		d, err := c.local.PeekAt(c.localKeys.String(key), r.Limiter, now, 0)
		v.Remaining, v.ResetAfter = d.Remaining, d.ResetAfter
		return v, err
	}
	if r.Algorithm.Bucket() {
		v.Bucket = estimate.GCRA(r)
	}
	h := c.counterHash(r, es)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.lookup(h, r, es)
	if e == nil || e.life == lifeGone {
		c.compactView(sh, h, r, now, &v)
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

// compactView fills v from a compact key's record, if sh holds one for
// r's counter of hash h in the window of now (requires the lock).
func (c *Checker) compactView(sh *shard, h uint64, r *config.Rule, now int64, v *CounterView) {
	if r.Algorithm.Bucket() || r.Window <= 0 {
		return
	}
	W := int64(r.Window)
	end := limiter.WindowStart(now, W) + W
	rec := sh.compact.Find(h, end)
	if rec == nil {
		return
	}
	v.Held, v.Instances = true, 1
	v.Used, v.Mine = int64(rec.Spent), int64(rec.Spent)
	v.Remaining, v.ResetAfter = max(0, r.Ceiling()-v.Used), time.Duration(end-now)
}

// Forget drops what this checker holds of rule r's counter for values es
// (hashed) once an operator reset it in the store: all of a `mode: local`
// counter (it lives only here); of another, that it was over (its
// tombstone too), and a held key re-reads the store at once, within ctx.
func (c *Checker) Forget(ctx context.Context, r *config.Rule, es []config.Entry) {
	if r.Mode == config.ModeLocal {
		c.local.Reset(c.localKeys.String(string(config.AppendCounterKey(nil, r, es))), r.Limiter)
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
		e.active, e.life = true, lifeHeld // read now, even if nobody uses it
		sh.schedule(e, now)
	}
	sh.mu.Unlock()
	if held {
		c.Refresh(ctx)
	}
}
