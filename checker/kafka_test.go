package checker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestCheckerDeltasThroughKafka: a checker emits to the real broker; a
// kafka-go consumer group reads the topic back; after dropping duplicate
// (instance, sequence) pairs the allowed hits equal what was admitted.
func TestCheckerDeltasThroughKafka(t *testing.T) {
	broker := testsvc.Kafka(t)
	topic := testsvc.Unique("checker")
	ctx := context.Background()
	prod, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	prod.Start(ctx)
	clk := &clock{}
	clk.ns.Store(t0)
	c, err := New(Config{InstanceName: "it"}, ruleStore(t, asyncRules), counters.NewMemStore(), prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	var admitted uint64
	for i := range 600 {
		clk.ns.Add(int64(3 * time.Millisecond))
		key := []string{"fixed", "bucket", "envoy", "sliding", "gcra"}[i%5]
		var d ratelimit.Decision
		hits := int64(i%3 + 1)
		if err := c.Check(ctx, req(hits, key, strconv.Itoa(i%7)), &d); err != nil {
			t.Fatal(err)
		}
		if d.Allowed() {
			admitted += uint64(hits)
		}
		if i%50 == 0 {
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := prod.Close(ctx); err != nil {
		t.Fatal(err)
	}
	emitted := c.Snapshot().DeltasEmitted

	cons, err := events.NewKafkaConsumer(events.KafkaConsumerConfig{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g")})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	r := events.NewReader(cons, nil)
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	seen := map[uint64]bool{}
	var sum uint64
	for uint64(len(seen)) < emitted {
		m, ds, err := r.Next(rctx)
		if err != nil {
			t.Fatalf("read %d of %d deltas: %v", len(seen), emitted, err)
		}
		for _, d := range ds {
			if d.InstanceId != c.Instance() {
				t.Fatalf("foreign instance %q", d.InstanceId)
			}
			if !seen[d.Sequence] {
				seen[d.Sequence] = true
				sum += d.AllowedCost
			}
		}
		r.Commit(rctx, m)
	}
	if sum != admitted {
		t.Fatalf("allowed hits in the topic %d, admitted %d", sum, admitted)
	}
}

// BenchmarkFlushToKafka measures the flusher: deltas built, encoded and
// produced per second to the real broker (1,000 dirty keys per flush).
func BenchmarkFlushToKafka(b *testing.B) {
	broker := testsvc.Kafka(b)
	ctx := context.Background()
	prod, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: []string{broker}, Topic: testsvc.Unique("bench"), Partitions: 8})
	if err != nil {
		b.Fatal(err)
	}
	prod.Start(ctx)
	defer prod.Close(ctx)
	clk := &clock{}
	clk.ns.Store(t0)
	c, _ := New(Config{InstanceName: "bench"}, ruleStore(b, asyncRules), counters.NewMemStore(), prod, clk)
	reqs := make([]*ratelimit.Request, 1000)
	for i := range reqs {
		reqs[i] = req(1, "big", "k"+strconv.Itoa(i))
	}
	var d ratelimit.Decision
	b.ReportAllocs()
	b.ResetTimer()
	var deltas uint64
	start := time.Now()
	for b.Loop() {
		for _, r := range reqs {
			c.Check(ctx, r, &d)
		}
		before := c.Snapshot().DeltasEmitted
		if err := c.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		deltas += c.Snapshot().DeltasEmitted - before
		clk.ns.Add(int64(time.Millisecond))
	}
	b.ReportMetric(float64(deltas)/time.Since(start).Seconds(), "deltas/s")
}
