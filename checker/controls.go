package checker

import (
	"context"
	"fmt"

	"github.com/velvetrope/velvetrope/internal/controlset"
)

// SyncControls reads the control store now (the poller does it every
// ControlPoll) and rebuilds what the request path applies when the store
// or the rules changed.
func (c *Checker) SyncControls(ctx context.Context) error {
	if c.ctlStore == nil {
		return nil
	}
	c.ctlMu.Lock()
	defer c.ctlMu.Unlock()
	now := c.clock.Now()
	since := c.ctlVersion
	if since == 0 {
		since = -1
	}
	v, list, err := c.ctlStore.Controls(ctx, since, now)
	if err != nil {
		c.Stats.ControlErrors.Add(1)
		return fmt.Errorf("checker: reading controls: %w", err)
	}
	rs := c.rules.Load()
	cur := c.controls.Load()
	switch {
	case v != c.ctlVersion || c.ctlVersion == 0:
		c.ctlVersion = v
	case cur != nil && cur.Rules() == rs && !cur.Expired(now):
		return nil // nothing changed
	case cur == nil:
		return nil
	default:
		list = cur.List() // the rules changed or a control expired: rebuild
	}
	if set := controlset.Compile(rs, list, now, c.seed); len(set.List()) > 0 {
		c.controls.Store(set) // also when none applies now: a reload may bring its rule back
	} else {
		c.controls.Store(nil) // the request path then skips controls with one load
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
