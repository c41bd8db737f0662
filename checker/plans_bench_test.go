package checker

import (
	"context"
	"strconv"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/plantable"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// BenchmarkCheckAsyncPlans is BenchmarkCheckAsync with the rule's limit
// taken from the client's plan among a million clients: compare the two
// in one run for what a plan costs a decision.
func BenchmarkCheckAsyncPlans(b *testing.B) {
	ms := counters.NewMemStore()
	tables := &plantable.Tables{}
	c, err := New(Config{CheckerConfig: config.CheckerConfig{MaxKeys: 1 << 20}, FlushThreshold: 1 << 30, Plans: tables},
		ruleStore(b, benchRules+"    plans: {table: customers, limits: {pro: 2000000000}}\n"), ms, &applyProducer{store: ms}, sysClock{})
	if err != nil {
		b.Fatal(err)
	}
	tb := plantable.New()
	batch := make([]plantable.Change, 0, 1<<20)
	for i := range 1 << 20 {
		batch = append(batch, plantable.Change{Key: tb.Key([]string{"u" + strconv.Itoa(i)}), Plan: "pro"})
	}
	batch = append(batch, plantable.Change{Key: tb.Key([]string{"priya"}), Plan: "pro"})
	if err := tb.Apply(batch); err != nil {
		b.Fatal(err)
	}
	tb.Publish()
	tables.Set("api", "customers", tb)
	r := req(1, "user_id", "priya")
	warm(b, c, r)
	var d ratelimit.Decision
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c.Check(context.Background(), r, &d)
		sinkAllowed = d.Code == ratelimit.OK
	}
	if c.Stats.SyncCharges.Load() > 3 {
		b.Fatalf("far band made %d store calls", c.Stats.SyncCharges.Load())
	}
}

// BenchmarkCheckAsyncTwoLimits is BenchmarkCheckAsync with a second limit
// on the descriptor (a day beside the second): compare the two in one run
// for what a further limit costs a decision.
func BenchmarkCheckAsyncTwoLimits(b *testing.B) {
	ms := counters.NewMemStore()
	c, err := New(Config{CheckerConfig: config.CheckerConfig{MaxKeys: 1 << 20}, FlushThreshold: 1 << 30},
		ruleStore(b, `domain: api
descriptors:
  - key: user_id
    algorithm: token_bucket
    limits:
      - {unit: second, requests_per_unit: 1000000000}
      - {unit: day, requests_per_unit: 1000000000000}
`), ms, &applyProducer{store: ms}, sysClock{})
	if err != nil {
		b.Fatal(err)
	}
	r := req(1, "user_id", "priya")
	warm(b, c, r)
	var d ratelimit.Decision
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c.Check(context.Background(), r, &d)
		sinkAllowed = d.Code == ratelimit.OK
	}
	if c.Stats.SyncCharges.Load() > 6 {
		b.Fatalf("far band made %d store calls", c.Stats.SyncCharges.Load())
	}
}
