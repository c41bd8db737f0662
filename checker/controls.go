package checker

import (
	"context"
	"fmt"
)

// SyncControls reads the control store now (the poller does it every
// ControlPoll) and rebuilds what the request path applies when the store
// or the rules changed.
func (c *Checker) SyncControls(ctx context.Context) error {
	if c.ctl == nil {
		return nil
	}
	if err := c.ctl.Sync(ctx, c.clock.Now()); err != nil {
		c.Stats.ControlErrors.Add(1)
		return fmt.Errorf("checker: %w", err)
	}
	return nil
}

// controlLoop re-reads the controls every ControlPoll.
func (c *Checker) controlLoop() {
	c.every(c.cfg.ControlPoll, nil, c.cfg.ControlPoll, func(ctx context.Context) {
		if err := c.SyncControls(ctx); err != nil {
			c.logControls.Warn("operator controls not refreshed; the last ones stay in force", "err", err)
		}
	})
}
