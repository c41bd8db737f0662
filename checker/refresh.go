package checker

import (
	"context"
	"math"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/rates"
)

// refreshBatch bounds the keys read in one refresher pass.
const refreshBatch = 4096

func (c *Checker) refreshLoop() { c.every(c.cfg.RefreshTick, nil, 5*time.Second, c.Refresh) }

// Refresh re-reads the keys due and drops idle ones. A key is due when at
// its rate it could reach its near band before its next read (and every
// MaxRefresh): reads grow with the keys near their limits, not all keys.
func (c *Checker) Refresh(ctx context.Context) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	now := c.clock.Now()
	items, ents, tags := c.collectDue(now)
	if len(items) == 0 {
		return
	}
	probe, err := c.admit(now)
	if err == nil {
		c.Stats.Refreshes.Add(uint64(len(items)))
		rctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
		err = c.store.Read(rctx, c.instance, items)
		cancel()
		c.brk.Done(now, err, probe)
	}
	if err != nil {
		c.Stats.RefreshErrors.Add(1)
		c.logRefresh.Warn("refreshing counters failed; deciding from what is known", "keys", len(items), "error", err)
		return
	}
	for i := range items {
		e, it := ents[i], &items[i]
		sh := &c.shards[e.hash&c.mask]
		sh.mu.Lock()
		if e.life != lifeGone {
			if tags[i] == tagOwn {
				if e.Answered() {
					c.Stats.Staleness.Observe(time.Duration(now - e.LastAnswer()))
				}
				c.applyRead(sh, e, it, now)
			} else {
				e.ctr.absorbOther(e, tags[i], it)
			}
		}
		sh.mu.Unlock()
		ents[i] = nil
	}
}

// collectDue pops the keys due at now: idle ones dropped, parked ones
// unread, up to refreshBatch reads collected (requires c.refreshMu). A
// pass starts where the last stopped, so that every shard gets its turn;
// with the batch full the rest still drop idle keys (no store wait).
func (c *Checker) collectDue(now int64) ([]counters.ReadItem, []*entry, []uint8) {
	items, ents, tags := c.readItems[:0], c.readEnts[:0], c.readTags[:0]
	idle := now - int64(c.cfg.IdleAfter)
	start, full := c.refreshNext, -1
	for j := range c.shards {
		i := (start + j) & int(c.mask)
		sh := &c.shards[i]
		sh.mu.Lock()
		c.dropParked(sh, now)
		for sh.refresh.Len() > 0 && sh.refresh.Min().nextRefresh <= now {
			if e := sh.refresh.Min(); e.used < idle && e.emit == emitClean {
				sh.refresh.Pop()
				c.dropEntry(sh, e, now)
				continue
			}
			if len(items) >= refreshBatch {
				if full < 0 {
					full = i // the next pass starts here
				}
				break
			}
			e := sh.refresh.Pop()
			switch {
			case e.rule.Mode == config.ModeLocal || e.rule.Limit == 0:
				// nothing to read (the limiter's, or refusals only): its idle eviction
				c.idle(sh, e, now)
			case !e.active && e.Answered() && parkable(e):
				c.idle(sh, e, now) // nothing to learn: no read
			case !e.Answered() && e.ctr.mineMemory() > 0 && c.allowance(e.rule) > 0:
				// spends its allowance, then learns from its charges: no read
				c.idle(sh, e, now)
			default:
				// put back far out: a failed read loses nothing
				sh.schedule(e, now+int64(c.cfg.MaxRefresh))
				items, ents, tags = e.ctr.reads(c, e, items, ents, tags)
			}
		}
		sh.mu.Unlock()
	}
	if full >= 0 {
		c.refreshNext = full
	}
	c.readItems, c.readEnts, c.readTags = items, ents, tags
	return items, ents, tags
}

// Refresh item tags: this instance's own counter, or another shard of a
// hot key (the first of a window resets the sum).
const (
	tagOwn uint8 = iota
	tagOtherFirst
	tagOther
	tagHot // a hot key's shared counter (hot.go)
)

// idle handles a due key nobody decided on since the store last answered
// (a read teaches nothing; requires the lock): unused for parkAfter — a
// key seen once, as most at a per-IP front — it is parked until used.
func (c *Checker) idle(sh *shard, e *entry, now int64) {
	after := min(int64(c.cfg.MaxRefresh), int64(parkAfter))
	if now-e.used < after {
		sh.schedule(e, e.used+after)
		return
	}
	e.life = lifeParked
	sh.parked.Push(e, e.used) // out of the heap: popped, not pushed back
}

// dropParked evicts sh's parked entries unused for IdleAfter (requires
// the lock); one still holding pending consumption waits for a later pass.
func (c *Checker) dropParked(sh *shard, now int64) {
	sh.parked.Drain(now-int64(c.cfg.IdleAfter), stillParked, func(e *entry) bool {
		if e.emit != emitClean {
			return false
		}
		c.dropEntry(sh, e, now)
		return true
	})
}

// stillParked: e, parked at its use used, was not used or evicted since.
func stillParked(e *entry, used int64) bool { return e.life == lifeParked && e.used == used }

// parkAfter is how long a key goes unused before the refresher stops
// reading it: one used less often pays a charge per use, not reads.
const parkAfter = time.Second

// parkable says whether e may be parked (counter.parkable).
func parkable(e *entry) bool { return e.ctr.parkable(e.rule) }

// applyRead records a read answer and schedules the next (requires the lock).
func (c *Checker) applyRead(sh *shard, e *entry, it *counters.ReadItem, now int64) {
	remaining, pred, ceiling, ok := e.ctr.absorbRead(c, e, it, now)
	if !ok {
		return
	}
	e.answerRemaining, e.sinceAnswer, e.stale = remaining, 0, false
	c.recut(e, now, remaining)
	e.roomUntil = 0 // a fresh read replaces what a refusal taught
	_, end := e.ctr.window(e.rule)
	switch {
	case remaining <= 0 && e.overUntil <= now:
		e.overUntil = now + int64(c.cfg.MinRefresh)
		if e.rule.Algorithm != config.AlgSlidingWindow {
			e.overUntil = min(e.overUntil, end) // a fixed window's end clears it
		}
	case remaining > 0 && e.overUntil > now:
		e.overUntil = 0 // a refresh shows room
	}
	e.active = false
	next := int64(c.cfg.MaxRefresh)
	room := remaining - pred - e.Threshold(c.band, e.used, ceiling)
	if rate := e.Fleet(e.used); room <= 0 {
		next = int64(c.cfg.MinRefresh)
	} else if rate > 0 {
		next = min(next, rates.MulDiv(room, int64(time.Second), 2*rate)) // 128 bits: room may be near the int64 bound
	}
	next = max(next, int64(c.cfg.MinRefresh))
	if end < math.MaxInt64-int64(c.cfg.MinRefresh) { // a new window's first read soon after it starts
		next = min(next, end+int64(c.cfg.MinRefresh)-now)
	}
	sh.schedule(e, now+max(next, int64(c.cfg.RefreshTick)))
}
