package operate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const resetRules = `domain: api
descriptors:
  - key: fixed
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: envoy
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: bucket
    algorithm: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: hot
    algorithm: fixed_window
    shards: 3
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: syncd
    algorithm: gcra
    mode: sync
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: local
    algorithm: fixed_window
    mode: local
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
  - key: big
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// resetPair is two checkers over one counters.MemStore whose deltas reach the
// store when prod releases them.
func resetPair(t *testing.T) (a, b *node, prod *applyProducer, clk *clock) {
	t.Helper()
	ms := counters.NewMemStore()
	clk = &clock{}
	clk.ns.Store(t0 + int64(30*time.Second)) // mid-window: the previous window exists for a sliding window
	ms.SetClock(clk)
	prod = &applyProducer{store: ms}
	rules := ruleStore(t, resetRules)
	mk := func(name string) *node { return newNode(t, checker.Config{InstanceName: name}, rules, ms, prod, clk) }
	return mk("a"), mk("b"), prod, clk
}

// admitted sends single hits through c until one is refused (at most n)
// and returns how many were admitted, flushing after each.
func admitted(t *testing.T, c *node, n int, kv ...string) int {
	t.Helper()
	got := 0
	for range n {
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(1, kv...), &d); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d.Code != ratelimit.OK {
			break
		}
		got++
	}
	return got
}

// TestResetGivesTheLimitBack: after a reset every checker admits the
// whole limit again — together exactly the limit, not more — whatever the
// algorithm, shards or mode; the other checker learns it from its next
// read.
func TestResetGivesTheLimitBack(t *testing.T) {
	ctx := context.Background()
	for _, key := range []string{"fixed", "envoy", "sliding", "bucket", "hot", "syncd"} {
		t.Run(key, func(t *testing.T) {
			a, b, _, clk := resetPair(t)
			// sync lets the other checker read what one admitted (a hot
			// key's other shards are known from reads only).
			sync := func(c *node) {
				clk.ns.Add(int64(time.Second))
				c.Refresh(ctx)
			}
			for _, c := range []*node{a, b} { // both hold the key, so reads cover its shards
				var d ratelimit.Decision
				if err := c.Check(ctx, req(0, key, "k"), &d); err != nil {
					t.Fatal(err)
				}
			}
			// Exhaust the counter from both checkers.
			n := admitted(t, a, 3, key, "k")
			sync(b)
			n += admitted(t, b, 10, key, "k")
			sync(a)
			if n != 5 {
				t.Fatalf("before the reset: admitted %d, want 5", n)
			}
			if got := admitted(t, a, 1, key, "k"); got != 0 {
				t.Fatal("a admits past the limit")
			}
			res, err := a.Reset(ctx, "api", []config.Entry{{Key: key, Value: "k"}})
			if err != nil || res.Scope != "all checkers" || res.StoreKeys == 0 {
				t.Fatalf("reset: %+v %v", res, err)
			}
			sync(b) // b learns the reset from its next read
			n = admitted(t, a, 2, key, "k")
			sync(b)
			n += admitted(t, b, 10, key, "k")
			sync(a)
			n += admitted(t, a, 10, key, "k")
			if n != 5 {
				t.Fatalf("after the reset: admitted %d, want exactly the limit 5", n)
			}
		})
	}
}

// TestResetInFlight: consumption decided before a reset and still in the
// pipeline lands after it and counts; nothing else from before does.
func TestResetInFlight(t *testing.T) {
	ctx := context.Background()
	a, _, prod, clk := resetPair(t)
	es := []config.Entry{{Key: "big", Value: "k"}}
	if got := admitted(t, a, 30, "big", "k"); got != 30 {
		t.Fatal(got)
	}
	clk.ns.Add(int64(time.Second)) // no longer young: far from the limit, decided in memory
	for range 2 {                  // in use, so the refresher reads it (and knows it far from the limit)
		if got := admitted(t, a, 1, "big", "k"); got != 1 {
			t.Fatal(got)
		}
		a.Refresh(ctx)
	}
	prod.hold = true
	for range 20 { // 10 per second: far from the limit, flushed, not yet applied
		clk.ns.Add(int64(100 * time.Millisecond))
		if got := admitted(t, a, 1, "big", "k"); got != 1 {
			t.Fatal(got)
		}
	}
	for _, d := range prod.held {
		if d.AlreadyApplied {
			t.Fatalf("the in-flight hits were charged at the store: the test needs them in memory (%v)", prod.held)
		}
	}
	if _, err := a.Reset(ctx, "api", es); err != nil {
		t.Fatal(err)
	}
	prod.hold = false
	prod.release()
	st, err := a.Inspect(ctx, "api", es)
	if err != nil || st.Global.Total != 20 || st.Local == nil || st.Local.Used != 20 {
		t.Fatalf("after the late deltas: store %+v local %+v %v (want the 20 in-flight hits)", st.Global, st.Local, err)
	}
	if got := admitted(t, a, 2000, "big", "k"); got != 980 {
		t.Fatalf("after the reset: admitted %d, want 980 (1000 less the in-flight hits)", got)
	}
}

func TestResetLocalAndErrors(t *testing.T) {
	ctx := context.Background()
	a, b, _, _ := resetPair(t)
	if admitted(t, a, 10, "local", "k") != 5 || admitted(t, b, 10, "local", "k") != 5 {
		t.Fatal("local counters are per checker")
	}
	res, err := a.Reset(ctx, "api", []config.Entry{{Key: "local", Value: "k"}})
	if err != nil || res.Scope != "this checker" {
		t.Fatalf("%+v %v", res, err)
	}
	if admitted(t, a, 10, "local", "k") != 5 || admitted(t, b, 10, "local", "k") != 0 {
		t.Fatal("only the receiving checker's local counter is reset")
	}
	for _, tc := range []struct {
		domain string
		es     []config.Entry
		field  string
	}{
		{"nope", []config.Entry{{Key: "fixed", Value: "k"}}, "domain"},
		{"api", []config.Entry{{Key: "unknown", Value: "k"}}, "descriptor"},
		{"api", []config.Entry{{Key: "free", Value: "k"}}, "descriptor"},
	} {
		_, err := a.Reset(ctx, tc.domain, tc.es)
		var fe *ratelimit.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s %v: %v, want a field error on %s", tc.domain, tc.es, err, tc.field)
		}
	}
	a.store.(*counters.MemStore).SetUnavailable(true)
	if _, err := a.Reset(ctx, "api", []config.Entry{{Key: "fixed", Value: "k"}}); !errors.Is(err, counters.ErrStoreUnavailable) {
		t.Fatalf("store down: %v", err)
	}
}

// TestInspectProbes: every kind of counter that is not a shared window is
// shown by a probe that charges and records nothing.
func TestInspectProbes(t *testing.T) {
	ctx := context.Background()
	a, _, _, _ := resetPair(t)
	for _, key := range []string{"local", "syncd", "bucket"} {
		admitted(t, a, 2, key, "k")
	}
	before := a.Snapshot().Decisions
	tests := []struct {
		key       string
		remaining int64
		scope     string
		unlimited bool
	}{
		{"local", 3, "this checker", false},
		{"syncd", 3, "all checkers", false},
		{"bucket", 3, "this checker", false},
		{"free", 0, "this checker", true},
	}
	for range 2 {
		for _, tc := range tests {
			st, err := a.Inspect(ctx, "api", []config.Entry{{Key: tc.key, Value: "k"}})
			if err != nil || st.Probe == nil || st.Probe.Remaining != tc.remaining || st.Probe.Scope != tc.scope ||
				st.Probe.Unlimited != tc.unlimited || !st.Probe.Allowed {
				t.Fatalf("%s: %+v %v", tc.key, st.Probe, err)
			}
		}
	}
	if after := a.Snapshot().Decisions; after != before {
		t.Fatalf("inspecting counted %d decisions", after-before)
	}
}

// TestInspectProbeOfAFreshKeySaysWhenItResets: a probe of a counter
// nobody used (a bucket no checker holds, a local and a sync counter)
// reports when it would reset, as a check's status does, never 0 for a
// rule with a limit (the docs promise so; the probe said 0).
func TestInspectProbeOfAFreshKeySaysWhenItResets(t *testing.T) {
	ctx := context.Background()
	a, _, _, _ := resetPair(t)
	for _, key := range []string{"local", "syncd", "bucket"} {
		st, err := a.Inspect(ctx, "api", []config.Entry{{Key: key, Value: "fresh"}})
		if err != nil || st.Probe == nil || st.Probe.ResetAfterMs <= 0 || !st.Probe.Allowed {
			t.Errorf("%s: %+v %v; want a reset after > 0", key, st.Probe, err)
		}
	}
}
