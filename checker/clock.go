package checker

import (
	"context"
	"time"
)

// heartbeat lists this instance in the store's registry, learns how many
// checkers are live, and clamps the clock to the store's.
func (c *Checker) heartbeat(ctx context.Context) error {
	sent := c.clock.Now()
	t1 := c.clock.Base()
	b, err := c.store.Heartbeat(ctx, c.instance, c.cfg.InstanceTTL)
	t2 := c.clock.Base()
	if err != nil {
		return err
	}
	c.live.Store(int32(max(b.Live, 1)))
	if b.Now > 0 {
		c.clock.Learn(b.Now, t1, t2, c.cfg.MaxClockSkew)
	}
	c.heard(b, sent, c.clock.Now())
	return nil
}

func (c *Checker) heartbeatLoop() {
	c.every(c.cfg.Heartbeat, nil, c.cfg.StoreTimeout*4, func(ctx context.Context) {
		if err := c.heartbeat(ctx); err != nil {
			c.logStore.Warn("heartbeat to the counter store failed; the last live count and clock adjustment stay", "error", err)
		}
	})
}

// Fleet reports what the registry last said: the live checkers (0 before
// the first heartbeat), the store's clock minus this checker's, and the
// adjustment applied to it (non-zero past MaxClockSkew).
func (c *Checker) Fleet() (live int, skew, adjust time.Duration) {
	return int(c.live.Load()), c.clock.Skew(), c.clock.Adjustment()
}

// fleet is the number of checkers to share a budget with: the registry's
// live count, or the instances the counter has seen when more.
func (c *Checker) fleet(e *entry) int64 {
	return int64(max(c.live.Load(), e.Instances, 1))
}
