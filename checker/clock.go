package checker

import (
	"context"
	"sync/atomic"
	"time"
)

// storeClock is the checker's clock: its own, moved by adj so that it
// stays within MaxClockSkew of the counter store's. Window starts and
// elapsed times of async and local decisions come from it, so a checker
// whose clock runs ahead cannot open a window early (nor late behind).
type storeClock struct {
	base interface{ Now() int64 }
	adj  atomic.Int64 // ns added to base
	// skew is the store's clock minus base at the last heartbeat (ns,
	// measured at the middle of the call), for metrics.
	skew atomic.Int64
}

func (c *storeClock) Now() int64 { return c.base.Now() + c.adj.Load() }

// learn takes a store time read between base times t1 and t2: the clock
// is clamped to the store's ± max.
func (c *storeClock) learn(store, t1, t2 int64, max time.Duration) {
	off := store - (t1+t2)/2
	c.skew.Store(off)
	m := int64(max)
	switch {
	case off > m:
		c.adj.Store(off - m)
	case off < -m:
		c.adj.Store(off + m)
	default:
		c.adj.Store(0)
	}
}

// heartbeat lists this instance in the store's registry, learns how many
// checkers are live, and clamps the clock to the store's.
func (c *Checker) heartbeat(ctx context.Context) error {
	t1 := c.clock.base.Now()
	b, err := c.store.Heartbeat(ctx, c.instance, c.cfg.InstanceTTL)
	t2 := c.clock.base.Now()
	if err != nil {
		return err
	}
	c.live.Store(int32(max(b.Live, 1)))
	if b.Now > 0 {
		c.clock.learn(b.Now, t1, t2, c.cfg.MaxClockSkew)
	}
	return nil
}

func (c *Checker) heartbeatLoop() {
	c.every(c.cfg.Heartbeat, nil, c.cfg.StoreTimeout*4, func(ctx context.Context) {
		if err := c.heartbeat(ctx); err != nil {
			c.logStore.Warn("heartbeat to the counter store failed; the last live count and clock adjustment stay", "error", err)
		}
	})
}

// Fleet reports what the registry last said: the live checkers sharing
// the counter store (0 before the first heartbeat), the store's clock
// minus this checker's own, and the adjustment applied to it (non-zero
// past MaxClockSkew).
func (c *Checker) Fleet() (live int, skew, adjust time.Duration) {
	return int(c.live.Load()), time.Duration(c.clock.skew.Load()), time.Duration(c.clock.adj.Load())
}

// fleet is the number of checkers to share a budget with: the registry's
// live count, or the instances the counter has seen when more.
func (c *Checker) fleet(e *entry) int64 {
	return int64(max(c.live.Load(), e.Instances, 1))
}
