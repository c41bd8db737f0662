package checker

import (
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
)

const memoryPathRules = `domain: api
descriptors:
  - key: nearbucket
    algorithm: token_bucket
    near_limit: async
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: syncenvoy
    mode: sync
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`

func memoryRig(t *testing.T, name string, ms *counters.MemStore, clk *clock) *rig {
	t.Helper()
	cs := &countingStore{MemStore: ms}
	prod := &applyProducer{store: ms}
	c, err := New(Config{InstanceName: name}, ruleStore(t, memoryPathRules), cs, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, store: cs, prod: prod, clk: clk}
}

func newClock() *clock {
	clk := &clock{}
	clk.ns.Store(t0)
	return clk
}

// TestBucketRetryIsForTheMissingPart: a bucket key decided in memory
// (near_limit: async) answers each refusal with the time its own missing
// tokens take: with 1 left at 10 a second, 2 hits wait 100 ms and 3 hits
// 200 ms — one refusal does not make the key "over" while a token is left.
func TestBucketRetryIsForTheMissingPart(t *testing.T) {
	ms := counters.NewMemStore()
	clk := newClock()
	ms.SetClock(clk)
	r := memoryRig(t, "a", ms, clk)
	steps := []struct {
		hits    int64
		allowed bool
		retry   time.Duration
	}{
		{9, true, 0},
		{2, false, 100 * time.Millisecond},
		{3, false, 200 * time.Millisecond},
		{1, true, 0},
	}
	for i, st := range steps {
		d := r.check(t, st.hits, "nearbucket", "x")
		if d.Allowed() != st.allowed || d.Statuses[0].RetryAfter != st.retry {
			t.Fatalf("step %d (%d hits): allowed %v retry %v, want %v %v", i, st.hits, d.Allowed(), d.Statuses[0].RetryAfter, st.allowed, st.retry)
		}
	}
}

// TestSyncEnvoyRuleKeepsItsChargeWhenRefused: under Envoy's semantics
// every call counts, also in `mode: sync`: a request another descriptor
// refuses is refunded from algorithm rules, never from an Envoy rule.
func TestSyncEnvoyRuleKeepsItsChargeWhenRefused(t *testing.T) {
	ms := counters.NewMemStore()
	clk := newClock()
	ms.SetClock(clk)
	r := memoryRig(t, "a", ms, clk)
	if d := r.check(t, 1, "syncenvoy", "x", "blocked", "y"); d.Allowed() {
		t.Fatal("a blocked descriptor admitted")
	}
	d := r.check(t, 1, "syncenvoy", "x")
	if !d.Allowed() || d.Statuses[0].Remaining != 3 {
		t.Fatalf("after a refused request and this one: allowed %v remaining %d, want 3 of 5 (both counted)", d.Allowed(), d.Statuses[0].Remaining)
	}
}
