package checker

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const hotRules = `domain: api
descriptors:
  - key: hot
    algorithm: fixed_window
    shards: 4
    rate_limit: {unit: second, requests_per_unit: 100}
`

// TestHotKeyShards: each instance counts a hot key in its own shard; a
// refresh sums the other shards into what it knows of the others.
func TestHotKeyShards(t *testing.T) {
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	rules := ruleStore(t, hotRules)
	a, _ := New(Config{InstanceName: "a"}, rules, ms, prod, clk)
	var b *Checker
	for { // two instances on different shards
		b, _ = New(Config{InstanceName: "b"}, rules, ms, prod, clk)
		if b.shardOf(4) != a.shardOf(4) {
			break
		}
	}
	for range 30 {
		var d ratelimit.Decision
		a.Check(context.Background(), req(1, "hot", "x"), &d)
	}
	a.Flush(context.Background())
	for _, d := range prod.all {
		if d.CounterKey != counters.ShardKey("api:hot|hot=x", a.shardOf(4)) {
			t.Fatalf("delta to %q, want a's shard", d.CounterKey)
		}
	}
	var d ratelimit.Decision
	b.Check(context.Background(), req(0, "hot", "x"), &d) // creates b's entry
	clk.ns.Add(int64(60 * time.Millisecond))
	b.Refresh(context.Background())
	b.Check(context.Background(), req(0, "hot", "x"), &d)
	if d.Statuses[0].Remaining != 70 {
		t.Fatalf("b sees remaining %d, want 70 (a's 30 hits in another shard)", d.Statuses[0].Remaining)
	}
}
