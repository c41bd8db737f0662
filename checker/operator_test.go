package checker

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
)

// An operator's actions live in package operate, which imports this one:
// the internal tests that need a control or a reset to exercise the
// request path do what operate does, through the engine's side of it
// (operator.go). Descriptors are of domain "api", on rules that neither
// hash values nor spread over shards (operate's own tests cover those).

// putControl stores a control of entries as operate.SetControl builds one
// (its id, the rule the entries match, created now, expiring after ttl
// unless 0) and applies it here at once.
func putControl(t testing.TB, c *Checker, action string, limit int64, ttl time.Duration, es []config.Entry) counters.Control {
	t.Helper()
	now := c.Now()
	ct := counters.Control{ID: counters.ControlID("api", es), Domain: "api", Entries: es, Action: action, Limit: limit, CreatedAt: now}
	if r := c.Rules().Match("api", es); r != nil {
		ct.Rule = r.ID
	}
	if ttl > 0 {
		ct.ExpiresAt = now + int64(ttl)
	}
	if err := c.store.(counters.ControlStore).PutControl(context.Background(), ct); err != nil {
		t.Fatal(err)
	}
	if err := c.SyncControls(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ct
}

// deleteControl deletes the control id from the store and here at once.
func deleteControl(t testing.TB, c *Checker, id string) {
	t.Helper()
	if _, err := c.store.(counters.ControlStore).DeleteControl(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if err := c.SyncControls(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// resetCounter resets the counter of entries in the store as operate.Reset
// does (a window counter's current and previous windows, a bucket's TAT)
// and has c forget what it holds of it.
func resetCounter(t testing.TB, c *Checker, es []config.Entry) {
	t.Helper()
	r := c.Rules().Match("api", es)
	if r == nil || r.Shards > 1 || r.Hashed != nil || r.Mode != config.ModeAsync {
		t.Fatalf("resetCounter: %v needs an async rule without shards or hashed values", es)
	}
	key := string(config.AppendCounterKey(nil, r, es))
	items := []counters.ResetItem{{Key: key, Kind: counters.KindTAT}}
	if kindOf(r) == counters.KindWindow {
		ws := limiter.WindowStart(c.Now(), int64(r.Window))
		items = []counters.ResetItem{{Key: key, Kind: counters.KindWindow, Window: ws},
			{Key: key, Kind: counters.KindWindow, Window: ws - int64(r.Window)}}
	}
	if err := c.store.(counters.Resetter).Reset(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	c.Forget(context.Background(), r, es)
}
