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
		c, err := New(Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}, InstanceName: "c"}, rules, ms, &applyProducer{store: ms}, clk)
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
	if s := a.out.Latency.Snapshot(); s.Count != 1 || s.SumSeconds != 0.02 {
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
	c, err := New(Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}, InstanceName: "c"}, ruleStore(t, rules), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	denied := [][]string{{"user", "evil"}, {"bucket", "evil"}, {"nomatch", "evil"}, {"blocked", "50.0.0.5"}}
	var ids []string
	for _, kv := range denied[:3] {
		ct := putControl(t, c, counters.ActionDeny, 0, 0, []config.Entry{{Key: kv[0], Value: kv[1]}})
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
		deleteControl(t, c, id)
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
