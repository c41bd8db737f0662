package checker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
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

// controlPair is two checkers sharing one counters.MemStore (one control store),
// on one clock.
func controlPair(t *testing.T) (a, b *Checker, clk *clock) {
	t.Helper()
	ms := counters.NewMemStore()
	clk = &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	rules := ruleStore(t, controlRules)
	mk := func() *Checker {
		c, err := New(Config{HashKey: []byte("k"), InstanceName: "c"}, rules, ms, &applyProducer{store: ms}, clk)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SyncControls(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	return mk(), mk(), clk
}

func run(t *testing.T, c *Checker, n int, kv ...string) string {
	t.Helper()
	var out []string
	for range n {
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(1, kv...), &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Code.String())
	}
	return strings.Join(out, " ")
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
	_, list, _ := a.ctlStore.Controls(context.Background(), -1, t0)
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

// TestLatencyHistograms: the emit latency is measured from a key's first
// pending decision, the staleness from the store's last answer.
func TestLatencyHistograms(t *testing.T) {
	ctx := context.Background()
	a, _, clk := controlPair(t)
	if got := run(t, a, 1, "user", "priya"); got != "allow" {
		t.Fatal(got)
	}
	clk.ns.Add(int64(20 * time.Millisecond))
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats.EmitLatency.Snapshot(); s.Count != 1 || s.SumSeconds != 0.02 {
		t.Fatalf("emit latency: %+v", s)
	}
	// a bucket key is read whether it is used or not (a window key
	// nobody decides on is parked)
	if got := run(t, a, 1, "bucket", "priya"); got != "allow" {
		t.Fatal(got)
	}
	clk.ns.Add(int64(10 * time.Second))
	a.Refresh(ctx)
	if s := a.Stats.Staleness.Snapshot(); s.Count != 1 || s.SumSeconds < 10 {
		t.Fatalf("staleness: %+v", s)
	}
}

// TestBlockedCountersReachTheAnalytics: a refusal of a blocked counter —
// an operator's deny control (on a window, a bucket, a shadow and a
// no-rule descriptor) or a rule file's `requests_per_unit: 0` — reaches
// the deltas as denied, charging nothing; they emitted nothing, so a
// blocked client hammering never appeared among the top-denied keys. Once
// the control is lifted, the key decides by its rule again from a clean
// counter (a bucket key whose blocked refusals were counted in a window
// entry gets a bucket entry back) and its idle entry is evicted.
func TestBlockedCountersReachTheAnalytics(t *testing.T) {
	const rules = controlRules + `  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
`
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	prod := &applyProducer{store: ms}
	c, err := New(Config{HashKey: []byte("k"), InstanceName: "c"}, ruleStore(t, rules), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	denied := [][]string{{"user", "evil"}, {"bucket", "evil"}, {"nomatch", "evil"}, {"blocked", "50.0.0.5"}}
	var ids []string
	for _, kv := range denied[:3] {
		ct, err := c.SetControl(ctx, ControlSpec{Domain: "api", Entries: []config.Entry{{Key: kv[0], Value: kv[1]}}, Action: counters.ActionDeny})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ct.ID)
	}
	for _, kv := range denied {
		if got := run(t, c, 5, kv...); got != "deny deny deny deny deny" {
			t.Fatalf("%v: %s", kv, got)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, d := range prod.all {
		if err := events.Validate(d); err != nil { // a bus sets an invalid delta aside: lost to the analytics
			t.Fatalf("delta of %s %s: %v", d.RuleId, d.DescriptorText, err)
		}
		if !d.AlreadyApplied {
			t.Fatalf("delta of %s %s: not already applied; a blocked counter has nothing to add", d.RuleId, d.DescriptorText)
		}
		if d.CountedCost != 0 || d.AllowedCount != 0 {
			t.Fatalf("delta of %s %s counts hits (%d) or admissions (%d) of a blocked counter", d.RuleId, d.DescriptorText, d.CountedCost, d.AllowedCount)
		}
		got[d.DescriptorText] += d.DeniedCount
	}
	for _, kv := range denied {
		if k := kv[0] + "=" + kv[1]; got[k] != 5 {
			t.Errorf("%s: %d denied in the deltas, want 5 (all: %v)", k, got[k], got)
		}
	}
	for _, id := range ids {
		if _, err := c.DeleteControl(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range denied[:2] {
		if got := run(t, c, 5, kv...); got != "allow allow allow allow deny" {
			t.Fatalf("%v once lifted: %s, want its rule's 4 then a refusal", kv, got)
		}
	}
	keys := c.Snapshot().Keys
	clk.ns.Add(int64(10 * time.Minute))
	for range 3 { // idle entries are parked, then dropped (once emitted)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		c.Refresh(ctx)
		clk.ns.Add(int64(3 * time.Minute))
	}
	if left := c.Snapshot().Keys; keys == 0 || left != 0 {
		t.Fatalf("keys: %d before idling, %d after; want every idle entry evicted", keys, left)
	}
}

// TestRefreshReturnsWhileIdleKeysCannotBeEmitted: a parked key unused for
// idle_after whose consumption the producer refuses (Kafka down) waits
// for a later pass; the refresher used to look at it again and again in
// the same pass, spinning forever with its shard locked (every request
// of the shard then hung).
func TestRefreshReturnsWhileIdleKeysCannotBeEmitted(t *testing.T) {
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	prod := &applyProducer{store: ms}
	c, err := New(Config{InstanceName: "c"}, ruleStore(t, controlRules), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 { // a few keys decide, are answered and go idle
		run(t, c, 2, "user", strings.Repeat("u", i+1))
	}
	prod.mu.Lock()
	prod.fail = errors.New("kafka down")
	prod.mu.Unlock()
	for range 3 {
		run(t, c, 1, "user", "u") // consumption nobody can emit
		clk.ns.Add(int64(2 * time.Second))
		c.Refresh(ctx) // parks the idle keys
	}
	clk.ns.Add(int64(10 * time.Minute))
	done := make(chan struct{})
	go func() {
		c.Refresh(ctx)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // a hang, not a speed: the pass is microseconds
		t.Fatal("Refresh did not return: it spins on a parked key it cannot drop")
	}
	if n := c.Snapshot().Keys; n == 0 {
		t.Fatal("every key was dropped, also the one holding consumption nobody emitted")
	}
}
