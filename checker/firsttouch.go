package checker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/rates"
)

// firstTouch is what the first-touch allowance needs (docs/design.md,
// "First touch from memory"): every live instance may admit a few hits of
// a window it has no store answer for from memory, and every charge
// reserves them for the instances the registry lists. Its fields are
// written by the heartbeat and by evictions, read by decisions.
type firstTouch struct {
	view   atomic.Pointer[members]
	joined atomic.Int64 // when the first heartbeat that answered came back (0: none yet)
	lastOK atomic.Int64 // when the last heartbeat that answered was sent
	// horizon: by counter hash, the end of the window of an entry evicted
	// with consumption or a charge in it. Its hits may still be in flight
	// and its allowance spent: a new entry of that hash neither spends
	// nor marks the window as charged (entry.whole) until it ends.
	horizon [horizonSlots]atomic.Int64
	// settle and stop, from the settings (start): spending starts settle
	// after joining and stops when the last answered heartbeat is older
	// than stop (docs/design.md gives the argument).
	settle, stop int64
	started      atomic.Bool // Start ran: its heartbeats are what the list comes from
	hearing      sync.Mutex  // one heartbeat at a time from the decisions (hearFleet)
}

const horizonSlots = 4096

// lazyRoom is the far-band margin a first-touch admission reports to the
// emission: the charges reserve the allowance whether it was emitted or
// not, so its hits may wait as long as a far key's.
const lazyRoom = int64(1) << 60

// errStaleFleet fails a charge whose list of live instances is older than
// their registrations last (the rule's failure policy decides).
var errStaleFleet = errors.New("checker: the registry of live checkers was not heard from within the instance ttl")

// members is the registry's list as a heartbeat heard it.
type members struct {
	others []string // the live instances beside this one
	all    []string // and this one: a charge of an entry that does not hold all its hits reserves its own too
	at     int64    // when that heartbeat was sent: the list is at least this fresh
}

// reserving is the instances a charge reserves allowances for: the
// others, and this one when its entry may not hold all its hits of the
// window (an entry of its hash was evicted with some of them in flight:
// its charge neither knows nor folds them).
func (m *members) reserving(whole bool) []string {
	if whole {
		return m.others
	}
	return m.all
}

// startFirstTouch derives the membership bounds from the settings.
func (c *Checker) startFirstTouch() {
	cf := &c.cfg
	skew := 2 * int64(cf.MaxClockSkew)
	c.ft.settle = int64(cf.InstanceTTL+cf.Heartbeat+cf.StoreTimeout) + skew
	c.ft.stop = int64(cf.InstanceTTL-cf.MaxEmitInterval-cf.PipelineLag-cf.FlushInterval) - skew
}

// heard records a heartbeat's answer: sent and back are this checker's
// clock before and after the call.
func (c *Checker) heard(b counters.Beat, sent, back int64) {
	others := make([]string, 0, len(b.Members)+1)
	for _, m := range b.Members {
		if m != c.instance {
			others = append(others, m)
		}
	}
	c.ft.view.Store(&members{others: others, all: append(others, c.instance), at: sent})
	c.ft.joined.CompareAndSwap(0, back)
	c.ft.lastOK.Store(sent)
}

// allowance is r's first-touch allowance per instance and window: a
// percent of its ceiling, at most MaxHeldHits; 0 where an instance cannot
// spend from memory safely — another mode or near_limit, a bucket (its
// state spans windows, so an evicted key's spending could not be told
// apart), a sliding window (the previous window's weight may leave less
// than an allowance, which an instance that has not read it cannot
// know), a hot key's shards, a pool or its borrowers.
func (c *Checker) allowance(r *config.Rule) int64 {
	if c.cfg.FirstTouchPercent <= 0 || r.Mode != config.ModeAsync || r.NearLimit != config.NearSync || r.Shards > 1 ||
		r.Pool != nil || r.IsPool || r.Unlimited || r.Limit <= 0 || r.Algorithm == config.AlgSlidingWindow ||
		kindOf(r) != counters.KindWindow {
		return 0
	}
	return min(c.cfg.MaxHeldHits, rates.MulDiv(r.Ceiling(), c.cfg.FirstTouchPercent, 100))
}

// firstTouchAdmits says whether cost more hits of e fit in this
// instance's allowance (requires the lock): e has no store answer for
// its window, the others list this instance, and no evicted entry of its
// hash may have spent the allowance of this window already.
func (c *Checker) firstTouchAdmits(e *entry, now, cost int64) bool {
	if cost <= 0 || e.ctr.known() {
		return false
	}
	a := c.allowance(e.rule)
	if a <= 0 || e.ctr.mineMemory()+cost > a {
		return false
	}
	return c.spending(now) && c.whole(e)
}

// whole says whether e holds all its instance's consumption of its
// current window: no entry of its hash left the table with some of it.
func (c *Checker) whole(e *entry) bool {
	start, _ := e.ctr.window(e.rule)
	return start >= e.whole
}

// ownKnown says whether e's memory hits are this instance's part of the
// window as the store counts it (a delta's own_after): after a store
// answer, or in a window whose every hit of this instance e holds (a key
// whose allowance is tracked: its evictions are remembered).
func (c *Checker) ownKnown(e *entry) bool {
	return e.Answered() || c.allowance(e.rule) > 0 && c.whole(e)
}

// reserveFirstTouch fills a charge's allowance and the instances it
// reserves for; stale: the list is older than an instance's registration
// lasts, so a newcomer may be missing from it (the charge is not made).
func (c *Checker) reserveFirstTouch(e *entry, q *counters.ChargeRequest, now int64) (stale bool) {
	a := c.allowance(e.rule)
	if a <= 0 {
		return false
	}
	v := c.ft.view.Load()
	if v == nil { // no heartbeat answered: stale once started (an engine never started spends nothing)
		return c.ft.started.Load()
	}
	q.Allowance, q.Mark = a, c.whole(e)
	q.Others = v.reserving(q.Mark)
	return now-v.at > int64(c.cfg.InstanceTTL)
}

// hearFleet makes a heartbeat for a charge whose list of live instances
// is stale (the background ones failed), one at a time, and gives q the
// list it brought; false: the list is still stale. Rare: the registry
// lives in the store the charge is about to call.
func (c *Checker) hearFleet(now int64, q *counters.ChargeRequest) bool {
	c.ft.hearing.Lock()
	defer c.ft.hearing.Unlock()
	fresh := func() bool {
		v := c.ft.view.Load()
		if v == nil || now-v.at > int64(c.cfg.InstanceTTL) {
			return false
		}
		q.Others = v.reserving(q.Mark)
		return true
	}
	if fresh() {
		return true // another decision heard it meanwhile
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StoreTimeout)
	defer cancel()
	if err := c.heartbeat(ctx); err != nil {
		return false
	}
	now = c.clock.Now()
	return fresh()
}

// othersAllowance is what the other live instances may hold of e's window
// unapplied from their allowances (requires the lock): the far band keeps
// clear of it, so the near band's charges, which reserve it exactly, start in time.
func (c *Checker) othersAllowance(e *entry) int64 {
	a := c.allowance(e.rule)
	if a <= 0 {
		return 0
	}
	n := c.fleet(e) - 1
	if v := c.ft.view.Load(); v != nil {
		n = max(n, int64(len(v.others)))
	}
	return a * n
}

// evicted remembers that an entry leaving the table may have spent its
// allowance in its window (requires the lock).
func (c *Checker) evicted(e *entry) {
	if c.allowance(e.rule) <= 0 {
		return
	}
	// consumption, or a charge (its mark tells the others this instance
	// spends no more allowance there, refused or not)
	if counted, _, _ := e.ctr.ownCounts(); counted <= 0 && !e.ctr.known() {
		return
	}
	_, end := e.ctr.window(e.rule)
	c.raiseHorizon(e.hash, end)
}

// raiseHorizon says that keys of hash h neither spend nor mark before end.
func (c *Checker) raiseHorizon(h uint64, end int64) {
	p := &c.ft.horizon[h>>52]
	for {
		old := p.Load()
		if old >= end || p.CompareAndSwap(old, end) {
			return
		}
	}
}
