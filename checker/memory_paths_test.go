package checker

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
)

const memoryPathRules = `domain: api
descriptors:
  - key: nearbucket
    algorithm: token_bucket
    near_limit: async
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: slowbucket
    algorithm: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 1000}
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

// TestBucketViewKeepsUnappliedHitsAcrossAReset: an operator resets a
// bucket through another checker; this one then admits 100 hits from
// memory, not yet in the store, and its next read learns of the reset. Its
// view restarts from the store's bucket and its own unapplied hits, from
// now — not from a full bucket (the reset bucket's TAT is 0, and the hits
// added to it vanished in the past).
func TestBucketViewKeepsUnappliedHitsAcrossAReset(t *testing.T) {
	ms := counters.NewMemStore()
	clk := newClock()
	ms.SetClock(clk)
	a, b := memoryRig(t, "a", ms, clk), memoryRig(t, "b", ms, clk)
	// taught: two answers, past min_refresh + pipeline_lag
	for _, at := range []time.Duration{0, 20 * time.Millisecond, time.Second} {
		clk.ns.Store(t0 + int64(at))
		if d := a.check(t, 1, "slowbucket", "x"); !d.Allowed() {
			t.Fatal("refused a fresh bucket")
		}
	}
	resetCounter(t, b.c, []config.Entry{{Key: "slowbucket", Value: "x"}})
	clk.ns.Add(int64(time.Millisecond))
	a.prod.hold = true // the 100 stay unapplied until the read
	charges := a.store.charges.Load()
	if d := a.check(t, 100, "slowbucket", "x"); !d.Allowed() || a.store.charges.Load() != charges {
		t.Fatalf("100 hits far from the limit: allowed %v, %d store charges; want a memory admission", d.Allowed(), a.store.charges.Load()-charges)
	}
	reads := a.store.reads.Load()
	for a.store.reads.Load() == reads && clk.Now() < t0+int64(10*time.Second) {
		clk.ns.Add(int64(10 * time.Millisecond))
		a.c.Refresh(context.Background())
	}
	if a.store.reads.Load() == reads {
		t.Fatal("a did not read the key within 10 s")
	}
	// The view counts a's hits the store has not applied from now: the
	// 100, and the one of the first three decided in memory, which is
	// applied after the reset too.
	e := a.c.entryOf(t, "slowbucket", "x")
	if rem, _ := e.ctr.state(a.c, e, clk.Now(), 0); rem != 899 {
		t.Fatalf("after the read: remaining %d, want 899 (the reset bucket less a's 101 unapplied hits)", rem)
	}
}

// entryOf returns the entry of a one-entry descriptor (test only: it
// takes the shard lock).
func (c *Checker) entryOf(t *testing.T, k, v string) *entry {
	t.Helper()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, e := range sh.keys {
			for ; e != nil; e = e.next {
				if len(e.vals) == 1 && e.vals[0] == v && e.rule.Path[0].Key == k {
					sh.mu.Unlock()
					return e
				}
			}
		}
		sh.mu.Unlock()
	}
	t.Fatalf("no entry for %s=%s", k, v)
	return nil
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
