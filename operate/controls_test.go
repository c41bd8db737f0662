package operate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/hist"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const controlRules = `domain: api
descriptors:
  - key: user
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: bucket
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: api_key
    hash_values: true
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// controlPair is two checkers sharing one counters.MemStore (one control
// store), on one clock.
func controlPair(t *testing.T) (a, b *node, clk *clock) {
	t.Helper()
	ms := counters.NewMemStore()
	clk = &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	rules := ruleStore(t, controlRules)
	mk := func() *node {
		n := newNode(t, checker.Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}, InstanceName: "c"}, rules, ms, &applyProducer{store: ms}, clk)
		if err := n.SyncControls(context.Background()); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return mk(), mk(), clk
}

func TestControlsDecide(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		spec   ControlSpec
		before int // requests before the control
		kv     []string
		want   string // the next 3 decisions under the control
		after  string // the next decision once it expired
	}{
		{"allow exempts an exhausted key", ControlSpec{Action: counters.ActionAllow, TTL: time.Second},
			4, []string{"user", "priya"}, "allow allow allow", "deny"},
		{"deny refuses a fresh key", ControlSpec{Action: counters.ActionDeny, TTL: time.Second},
			0, []string{"user", "priya"}, "deny deny deny", "allow"},
		{"deny with no rule still refuses", ControlSpec{Action: counters.ActionDeny, TTL: time.Second},
			0, []string{"nobody", "x"}, "deny deny deny", "allow"},
		{"deny beats shadow mode", ControlSpec{Action: counters.ActionDeny, TTL: time.Second},
			0, []string{"shadow", "s"}, "deny deny deny", "allow"},
		{"a raised limit keeps the count", ControlSpec{Action: counters.ActionLimit, Limit: 6, TTL: time.Second},
			3, []string{"user", "priya"}, "allow allow allow", "deny"},
		{"a lowered limit keeps the count", ControlSpec{Action: counters.ActionLimit, Limit: 2, TTL: time.Second},
			1, []string{"user", "priya"}, "allow deny deny", "allow"},
		// A bucket keeps its state as a theoretical arrival time: the hit
		// taken at 1/min put it 60 s ahead, more than 4/min's burst covers.
		{"limit on a bucket", ControlSpec{Action: counters.ActionLimit, Limit: 1, TTL: time.Second},
			0, []string{"bucket", "b"}, "allow deny deny", "deny"},
		{"hashed values match the raw ones", ControlSpec{Action: counters.ActionAllow, TTL: time.Second},
			1, []string{"api_key", "sk_live_1"}, "allow allow allow", "deny"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b, clk := controlPair(t)
			if tc.before > 0 {
				run(t, a, tc.before, tc.kv...)
			}
			tc.spec.Domain = "api"
			tc.spec.Entries = []config.Entry{{Key: tc.kv[0], Value: tc.kv[1]}}
			ct, err := a.SetControl(ctx, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := run(t, a, 3, tc.kv...); got != tc.want {
				t.Fatalf("under the control on the setting checker: %q, want %q", got, tc.want)
			}
			// The other checker sees it after its poll.
			if _, ok := b.ControlFor("api", tc.spec.Entries); ok {
				t.Fatal("the other checker applied the control before reading the store")
			}
			if err := b.SyncControls(ctx); err != nil {
				t.Fatal(err)
			}
			if got, ok := b.ControlFor("api", tc.spec.Entries); !ok || got.ID != ct.ID {
				t.Fatalf("other checker: %+v %v", got, ok)
			}
			clk.ns.Add(int64(time.Second)) // expired: the rule decides again (same window)
			if got := run(t, a, 1, tc.kv...); got != tc.after {
				t.Fatalf("after expiry: %q, want %q", got, tc.after)
			}
			if err := a.SyncControls(ctx); err != nil {
				t.Fatal(err)
			}
			if n := len(a.Controls()); n != 0 {
				t.Fatalf("%d controls listed after expiry", n)
			}
		})
	}
}

func TestControlsHashedNeverStoredRaw(t *testing.T) {
	a, _, _ := controlPair(t)
	ct, err := a.SetControl(context.Background(), ControlSpec{Domain: "api", Action: counters.ActionDeny,
		Entries: []config.Entry{{Key: "api_key", Value: "sk_live_SECRET"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, list, _ := a.ctl.Controls(context.Background(), -1, t0)
	if len(list) != 1 || strings.Contains(list[0].Entries[0].Value, "SECRET") || ct.Entries[0].Value != list[0].Entries[0].Value {
		t.Fatalf("stored control: %+v", list)
	}
	if got := run(t, a, 1, "api_key", "sk_live_SECRET"); got != "deny" {
		t.Fatalf("denied key: %s", got)
	}
	if got := run(t, a, 1, "api_key", "sk_live_OTHER"); got != "allow" {
		t.Fatalf("another key: %s", got)
	}
}

func TestControlsDeleteAndReplace(t *testing.T) {
	ctx := context.Background()
	a, b, _ := controlPair(t)
	es := []config.Entry{{Key: "user", Value: "priya"}}
	deny, err := a.SetControl(ctx, ControlSpec{Domain: "api", Entries: es, Action: counters.ActionDeny})
	if err != nil {
		t.Fatal(err)
	}
	allow, err := b.SetControl(ctx, ControlSpec{Domain: "api", Entries: es, Action: counters.ActionAllow, Reason: "vip"})
	if err != nil {
		t.Fatal(err)
	}
	if allow.ID != deny.ID {
		t.Fatal("one descriptor has one control: the second must replace the first")
	}
	if err := a.SyncControls(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, a, 6, "user", "priya"); got != "allow allow allow allow allow allow" {
		t.Fatalf("replaced by allow: %s", got)
	}
	ok, err := a.DeleteControl(ctx, allow.ID)
	if err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if ok, _ := a.DeleteControl(ctx, allow.ID); ok {
		t.Fatal("deleting twice reported a deletion")
	}
	if got := run(t, a, 1, "user", "priya"); got != "allow" {
		t.Fatalf("the rule decides again (nothing was counted while exempt): %s", got)
	}
	if len(a.Controls()) != 0 {
		t.Fatal("controls listed after delete")
	}
}

func TestControlSpecErrors(t *testing.T) {
	a, _, _ := controlPair(t)
	es := []config.Entry{{Key: "user", Value: "priya"}}
	tests := []struct {
		spec  ControlSpec
		field string
	}{
		{ControlSpec{Entries: es, Action: counters.ActionDeny}, "domain"},
		{ControlSpec{Domain: "nope", Entries: es, Action: counters.ActionDeny}, "domain"},
		{ControlSpec{Domain: "api", Action: counters.ActionDeny}, "descriptor"},
		{ControlSpec{Domain: "api", Entries: []config.Entry{{Value: "x"}}, Action: counters.ActionDeny}, "descriptor[0].key"},
		{ControlSpec{Domain: "api", Entries: es, Action: "block"}, "action"},
		{ControlSpec{Domain: "api", Entries: es, Action: counters.ActionDeny, Limit: 3}, "limit"},
		{ControlSpec{Domain: "api", Entries: es, Action: counters.ActionLimit, Limit: -1, TTL: time.Second}, "limit"},
		{ControlSpec{Domain: "api", Entries: es, Action: counters.ActionLimit, Limit: 5}, "ttl"},
		{ControlSpec{Domain: "api", Entries: []config.Entry{{Key: "nobody", Value: "x"}}, Action: counters.ActionLimit, Limit: 5, TTL: time.Second}, "descriptor"},
		{ControlSpec{Domain: "api", Entries: es, Action: counters.ActionDeny, TTL: -time.Second}, "ttl"},
	}
	for _, tc := range tests {
		_, err := a.SetControl(context.Background(), tc.spec)
		var fe *ratelimit.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want a field error on %s", tc.spec, err, tc.field)
		}
	}
	if len(a.Controls()) != 0 {
		t.Fatal("a refused control was stored")
	}
}

// TestControlsFollowReload: a control built against one rule set is
// rebuilt against the next (a limit override keeps the new rule's
// algorithm; a rule that is gone leaves nothing to override).
func TestControlsFollowReload(t *testing.T) {
	ctx := context.Background()
	a, _, _ := controlPair(t)
	es := []config.Entry{{Key: "user", Value: "priya"}}
	if _, err := a.SetControl(ctx, ControlSpec{Domain: "api", Entries: es, Action: counters.ActionLimit, Limit: 1, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := run(t, a, 2, "user", "priya"); got != "allow deny" {
		t.Fatalf("override: %s", got)
	}
	next := ruleStore(t, strings.Replace(controlRules, "key: user\n", "key: gone\n", 1)).Load()
	a.rules.Swap(next)
	if err := a.SyncControls(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, a, 1, "user", "priya"); got != "allow" {
		t.Fatalf("after the rule went away: %s (no rule, no override)", got)
	}
	if len(a.Controls()) != 1 {
		t.Fatal("a control whose rule went away must still be listed")
	}
	// The rule comes back: the override applies again, on the same counter.
	a.rules.Swap(ruleStore(t, controlRules).Load())
	if err := a.SyncControls(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, a, 1, "user", "priya"); got != "deny" {
		t.Fatalf("after the rule came back: %s, want the override (limit 1, used)", got)
	}
}

func TestControlsStoreDown(t *testing.T) {
	a, _, _ := controlPair(t)
	a.store.(*counters.MemStore).SetUnavailable(true)
	_, err := a.SetControl(context.Background(), ControlSpec{Domain: "api", Action: counters.ActionDeny,
		Entries: []config.Entry{{Key: "user", Value: "priya"}}})
	if !errors.Is(err, counters.ErrStoreUnavailable) {
		t.Fatalf("set with the store down: %v", err)
	}
	if err := a.SyncControls(context.Background()); err == nil || a.Snapshot().ControlErrors != 1 {
		t.Fatalf("sync with the store down: %v, %d errors counted", err, a.Snapshot().ControlErrors)
	}
}

// gauges keeps the gauges a checker registers.
type gauges map[string]func() float64

func (g gauges) Counter(string, string, func() float64)                            {}
func (g gauges) Gauge(name, _ string, value func() float64)                        { g[name] = value }
func (g gauges) Labeled(string, string, string, string, func() map[string]float64) {}
func (g gauges) Histogram(string, string, *hist.Histogram)                         {}

// TestControlsGaugeCountsWhatIsListed: the checker's gauge of controls in
// force counts what Controls lists (GET /v1/controls), its own copy of the
// rule: live controls, pool capacities apart, expired ones gone before the
// next read of the store.
func TestControlsGaugeCountsWhatIsListed(t *testing.T) {
	ctx := context.Background()
	c, _, clk := boundChecker(t)
	g := gauges{}
	c.RegisterMetrics(g)
	gauge := g["velvetrope_checker_controls"]
	if gauge == nil {
		t.Fatal("no velvetrope_checker_controls gauge")
	}
	spec := func(v, action string, limit int64, ttl time.Duration) ControlSpec {
		return ControlSpec{Domain: "api", Entries: []config.Entry{{Key: "hard", Value: v}}, Action: action, Limit: limit, TTL: ttl}
	}
	var deny counters.Control
	steps := []struct {
		name string
		do   func() error
		want int
	}{
		{"none", func() error { return nil }, 0},
		{"a deny", func() (err error) { deny, err = c.SetControl(ctx, spec("a", counters.ActionDeny, 0, 0)); return err }, 1},
		{"an allow for a second", func() error { _, err := c.SetControl(ctx, spec("b", counters.ActionAllow, 0, time.Second)); return err }, 2},
		{"a limit for two", func() error {
			_, err := c.SetControl(ctx, spec("c", counters.ActionLimit, 5, 2*time.Second))
			return err
		}, 3},
		{"a pool's capacity", func() error { return c.SetPool(ctx, "api", "shared", 50) }, 3},
		{"the allow expired, not yet read again", func() error { clk.ns.Add(int64(time.Second)); return nil }, 2},
		{"read again", func() error { return c.SyncControls(ctx) }, 2},
		{"the deny deleted", func() error { _, err := c.DeleteControl(ctx, deny.ID); return err }, 1},
	}
	for i, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("step %d %s: %v", i, st.name, err)
		}
		if got, listed := gauge(), len(c.Controls()); got != float64(st.want) || listed != st.want {
			t.Errorf("step %d %s: gauge %v, %d listed; want %d", i, st.name, got, listed, st.want)
		}
	}
}
