package checker

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// boundRules has a rule of every throttle that multiplies its limit, and
// a burst that an override scales.
const boundRules = `domain: api
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 1000}
descriptors:
  - key: hard
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: elastic
    algorithm: fixed_window
    throttle: {type: elastic, pool: shared, max_multiplier: 100}
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: soft
    algorithm: fixed_window
    throttle: {type: soft, overage_percent: 1000}
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: burst
    algorithm: token_bucket
    burst: 1000
    rate_limit: {unit: minute, requests_per_unit: 4}
`

func boundChecker(t *testing.T) (*Checker, *counters.MemStore, *clock) {
	t.Helper()
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}, InstanceName: "c"}, ruleStore(t, boundRules), ms, &applyProducer{store: ms}, clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SyncControls(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, ms, clk
}

// TestStoredControlsOutOfBounds: a control read from the store is input
// too (written by another version, or by hand): one whose numbers are out
// of bounds is not applied, and never makes the checker derive an
// overflowed rule.
func TestStoredControlsOutOfBounds(t *testing.T) {
	c, ms, clk := boundChecker(t)
	ctx := context.Background()
	rs := c.rules.Load()
	put := func(ct counters.Control) {
		t.Helper()
		ct.ID = counters.ControlID(ct.Domain, ct.Entries)
		if err := ms.PutControl(ctx, ct); err != nil {
			t.Fatal(err)
		}
	}
	es := []config.Entry{{Key: "elastic", Value: "v"}}
	put(counters.Control{Domain: "api", Entries: es, Action: counters.ActionLimit, Limit: 1 << 62,
		Rule: rs.Match("api", es).ID, ExpiresAt: clk.Now() + int64(time.Hour)})
	pool := rs.Pool("api", "shared")
	put(counters.Control{Domain: "api", Entries: pool.Path, Action: counters.ActionPool, Limit: -5, Rule: pool.ID})
	if err := c.SyncControls(ctx); err != nil {
		t.Fatal(err)
	}
	var d ratelimit.Decision
	if err := c.Check(ctx, req(1, "elastic", "v"), &d); err != nil {
		t.Fatal(err)
	}
	if st := d.Statuses[0]; d.Code != ratelimit.OK || st.Limit != 4 {
		t.Fatalf("an out-of-bounds stored limit: %s limit %d, want the file's rule (limit 4)", d.Code, st.Limit)
	}
	for _, p := range c.Rules().Pools() {
		if r := c.PoolRule(p); r != p || r.Limit != 1000 {
			t.Fatalf("an out-of-bounds stored capacity applied: %s decides with %+v", p.ID, r)
		}
	}
}

// TestHugeLimitSchedules: a key far below a limit near the int64 bound
// is re-read on the far band's schedule (MaxRefresh): room × 1 s is
// computed in 128 bits, where it overflowed into a re-read every
// MinRefresh (or a random interval).
func TestHugeLimitSchedules(t *testing.T) {
	ctx := context.Background()
	for _, limit := range []int64{math.MaxInt64 / 2, math.MaxInt64 / 3, math.MaxInt64 - 1, 1 << 40} {
		c, _, clk := boundChecker(t)
		es := []config.Entry{{Key: "hard", Value: "v"}}
		putControl(t, c, counters.ActionLimit, limit, time.Hour, es)
		for i := range 400 {
			clk.ns.Add(int64(time.Millisecond))
			var d ratelimit.Decision
			if err := c.Check(ctx, req(1000, "hard", "v"), &d); err != nil {
				t.Fatal(err)
			}
			if d.Code != ratelimit.OK {
				t.Fatalf("limit %d step %d: %s", limit, i, codes(d))
			}
			if i%100 == 99 {
				c.Flush(ctx)
				c.Refresh(ctx)
			}
		}
		clk.ns.Add(int64(time.Second))
		c.Refresh(ctx)
		v, err := c.Counter(c.Rules().Match("api", es), es, clk.Now())
		if err != nil || !v.Held {
			t.Fatalf("limit %d: the counter's view: %+v %v", limit, v, err)
		}
		if next := time.Duration(v.NextRefresh - clk.Now()); next < c.cfg.MaxRefresh-time.Millisecond {
			t.Errorf("limit %d: next refresh in %v, want the far band's %v", limit, next, c.cfg.MaxRefresh)
		}
	}
}
