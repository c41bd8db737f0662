package checker

import (
	"strconv"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/plantable"
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
	farLoop(b, c, 3)
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
	farLoop(b, c, 6) // two limits: each warmed through its own store answers
}
