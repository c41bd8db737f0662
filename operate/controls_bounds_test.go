package operate

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/checker"
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

func boundChecker(t *testing.T) (*node, *counters.MemStore, *clock) {
	t.Helper()
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c := newNode(t, checker.Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}, InstanceName: "c"}, ruleStore(t, boundRules), ms, &applyProducer{store: ms}, clk)
	if err := c.SyncControls(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, ms, clk
}

// TestControlBounds: every number an operator sends in a control (ttl,
// limit under each throttle) at 0, at its bound, one past it and where it
// used to overflow: accepted values are stored as given and apply; the
// others are refused with a field error naming the field, and nothing is
// stored.
func TestControlBounds(t *testing.T) {
	maxElastic := config.MaxRequestsPerUnit(config.ThrottleElastic)
	maxSoft := config.MaxRequestsPerUnit(config.ThrottleSoft)
	maxBurst := int64(math.MaxInt64 / 1000)
	tests := []struct {
		name   string
		key    string
		action string
		limit  int64
		ttl    time.Duration
		field  string // "" accepted
	}{
		{"ttl 0: until deleted", "hard", counters.ActionDeny, 0, 0, ""},
		{"ttl at the bound", "hard", counters.ActionDeny, 0, MaxControlTTL, ""},
		{"ttl past the bound", "hard", counters.ActionDeny, 0, MaxControlTTL + 1, "ttl"},
		{"ttl 2500000h (wrapped the expiry)", "hard", counters.ActionDeny, 0, 2_500_000 * time.Hour, "ttl"},
		{"ttl the int64 maximum", "hard", counters.ActionAllow, 0, math.MaxInt64, "ttl"},
		{"ttl negative", "hard", counters.ActionAllow, 0, -time.Nanosecond, "ttl"},
		{"hard limit 0", "hard", counters.ActionLimit, 0, time.Hour, ""},
		{"hard limit at the int64 maximum", "hard", counters.ActionLimit, math.MaxInt64, time.Hour, ""},
		{"hard limit negative", "hard", counters.ActionLimit, -1, time.Hour, "limit"},
		{"elastic limit 0", "elastic", counters.ActionLimit, 0, time.Hour, ""},
		{"elastic limit at the bound", "elastic", counters.ActionLimit, maxElastic, time.Hour, ""},
		{"elastic limit past the bound", "elastic", counters.ActionLimit, maxElastic + 1, time.Hour, "limit"},
		{"elastic limit 2^62 (overflowed × max_multiplier)", "elastic", counters.ActionLimit, 1 << 62, time.Hour, "limit"},
		{"elastic limit the int64 maximum", "elastic", counters.ActionLimit, math.MaxInt64, time.Hour, "limit"},
		{"soft limit at the bound", "soft", counters.ActionLimit, maxSoft, time.Hour, ""},
		{"soft limit past the bound", "soft", counters.ActionLimit, maxSoft + 1, time.Hour, "limit"},
		{"soft limit 2^62", "soft", counters.ActionLimit, 1 << 62, time.Hour, "limit"},
		{"burst limit at the bound", "burst", counters.ActionLimit, maxBurst, time.Hour, ""},
		{"burst limit past the bound (burst × limit)", "burst", counters.ActionLimit, maxBurst + 1, time.Hour, "limit"},
	}
	for i, tc := range tests {
		c, _, clk := boundChecker(t)
		es := []config.Entry{{Key: tc.key, Value: "v"}}
		ct, err := c.SetControl(context.Background(), ControlSpec{Domain: "api", Entries: es, Action: tc.action, Limit: tc.limit, TTL: tc.ttl})
		if tc.field != "" {
			var fe *ratelimit.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("step %d %s: got %v, want a field error on %s", i, tc.name, err, tc.field)
			}
			if n := len(c.Controls()); n != 0 {
				t.Errorf("step %d %s: refused, yet %d controls listed", i, tc.name, n)
			}
			continue
		}
		if err != nil {
			t.Errorf("step %d %s: got %v, want it accepted", i, tc.name, err)
			continue
		}
		if tc.ttl > 0 && ct.ExpiresAt != clk.Now()+int64(tc.ttl) {
			t.Errorf("step %d %s: expires at %d, want now + ttl = %d", i, tc.name, ct.ExpiresAt, clk.Now()+int64(tc.ttl))
		}
		if got := c.Controls(); len(got) != 1 || got[0].ID != ct.ID {
			t.Errorf("step %d %s: listed %+v, want the control", i, tc.name, got)
		}
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(1, tc.key, "v"), &d); err != nil {
			t.Fatal(err)
		}
		st := d.Statuses[0]
		switch {
		case tc.action == counters.ActionDeny && d.Code != ratelimit.OverLimit:
			t.Errorf("step %d %s: a deny in force answered %s", i, tc.name, d.Code)
		case tc.action == counters.ActionLimit && tc.limit > 0 && (d.Code != ratelimit.OK || st.Remaining < 0 || st.Limit != tc.limit):
			t.Errorf("step %d %s: one hit under limit %d: %s, limit %d, remaining %d", i, tc.name, tc.limit, d.Code, st.Limit, st.Remaining)
		case tc.action == counters.ActionLimit && tc.limit == 0 && d.Code != ratelimit.OverLimit:
			t.Errorf("step %d %s: limit 0 answered %s, want a refusal", i, tc.name, d.Code)
		}
		if tc.ttl > 0 { // it applies until its ttl, not one nanosecond past it
			clk.ns.Add(int64(tc.ttl))
			if err := c.SyncControls(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := len(c.Controls()); n != 0 {
				t.Errorf("step %d %s: %d controls listed after the ttl", i, tc.name, n)
			}
		}
	}
}

// TestPoolCapacityBounds: a pool's capacity from PUT /v1/pools is held to
// the bound of a rule file's pool (config.CheckPoolCapacity).
func TestPoolCapacityBounds(t *testing.T) {
	tests := []struct {
		capacity int64
		ok       bool
	}{
		{-1, false}, {0, false}, {1, true}, {1 << 40, true}, {1<<40 + 1, true}, {math.MaxInt64, true},
	}
	for i, tc := range tests {
		c, _, _ := boundChecker(t)
		err := c.SetPool(context.Background(), "api", "shared", tc.capacity)
		if want := config.CheckPoolCapacity(tc.capacity); (err == nil) != (want == nil) {
			t.Errorf("step %d capacity %d: got %v, the rule file's bound says %v", i, tc.capacity, err, want)
		}
		var fe *ratelimit.FieldError
		switch {
		case !tc.ok && (!errors.As(err, &fe) || fe.Field != "requests_per_unit"):
			t.Errorf("step %d capacity %d: got %v, want a field error on requests_per_unit", i, tc.capacity, err)
		case tc.ok && err != nil:
			t.Errorf("step %d capacity %d: got %v, want it accepted", i, tc.capacity, err)
		case tc.ok:
			// An elastic tenant borrows at once from the pool at that capacity.
			for range 5 {
				var d ratelimit.Decision
				if err := c.Check(context.Background(), req(1, "elastic", "acme"), &d); err != nil {
					t.Fatal(err)
				}
				if d.Code != ratelimit.OK {
					t.Errorf("step %d capacity %d: a borrower was refused: %s", i, tc.capacity, codes(d))
				}
			}
		}
	}
}
