package aggregator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/sink"
)

func produceAll(t *testing.T, broker, topic string, ds []*eventsv1.Delta) {
	t.Helper()
	ctx := context.Background()
	p, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	p.Start(ctx)
	for _, d := range ds { // one by one: each is its own message, as retries make them
		if err := p.Produce(ctx, []*eventsv1.Delta{d}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// usageSink is a sink writer into a ClickHouse database of the test's own.
func usageSink(t *testing.T) (*sink.Writer, *sink.ClickHouse) {
	t.Helper()
	ch, err := sink.NewClickHouse(sink.ClickHouseConfig{Addr: testsvc.ClickHouse(t), Database: testsvc.Unique("agg")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	w, err := sink.NewWriter(sink.WriterConfig{FlushInterval: 100 * time.Millisecond}, ch)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(context.Background())
	t.Cleanup(func() { w.Stop(context.Background()) })
	return w, ch
}

// allowedIn sums the allowed requests ClickHouse holds per descriptor.
func allowedIn(t *testing.T, ch *sink.ClickHouse) map[string]uint64 {
	t.Helper()
	rules, err := ch.Rules(context.Background(), sink.RulesQuery{Since: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, r := range rules {
		out[r.Rule] += r.Allowed
	}
	return out
}

func total(t *testing.T, store *counters.Redis, key string) int64 {
	t.Helper()
	items := []counters.ReadItem{{Key: key, Kind: counters.KindWindow, Window: w0}}
	if err := store.Read(context.Background(), "nobody/0", items); err != nil {
		t.Fatal(err)
	}
	return items[0].Total
}

// TestKafkaAggregatorAtMostOnce: the same deltas reach Redis through a
// producer that wrote some twice, an aggregator killed after its Redis
// apply and before its offset commit (a hook, not a timing race), and a
// second aggregator that re-reads with other batch boundaries. The Redis
// totals equal the hits admitted, exactly.
func TestKafkaAggregatorAtMostOnce(t *testing.T) {
	broker, raddr := testsvc.Kafka(t), testsvc.Redis(t)
	topic, group := testsvc.Unique("agg"), testsvc.Unique("grp")
	rc := redis.NewClient(&redis.Options{Addr: raddr})
	defer rc.Close()
	store := counters.NewRedis(rc, testsvc.Unique("a"), 0)

	keys := []string{"api:k|k=a", "api:k|k=b", "api:k|k=c"}
	want := map[string]int64{}
	var ds []*eventsv1.Delta
	for i := range 60 {
		key := keys[i%3]
		d := &eventsv1.Delta{InstanceId: "c/1", Sequence: uint64(i + 1), Domain: "api", RuleId: "api:k",
			CounterKey: key, Algorithm: "fixed_window", WindowStartUnixNanos: w0, WindowNanos: 60e9, Limit: 1000,
			AllowedCount: 1, AllowedCost: uint64(i%4 + 1), CountedCost: uint64(i%4 + 1), FirstUnixNanos: w0 + 1, LastUnixNanos: w0 + 1,
			// the key's stream: one allowed request per delta, cumulative in the minute
			Minute: &eventsv1.MinuteUsage{MinuteUnix: w0 / 1e9 / 60 * 60, Stream: uint64(i%3 + 1), AllowedCount: uint64(i/3 + 1)}}
		want[key] += int64(d.CountedCost)
		ds = append(ds, d)
		if i%10 == 0 {
			ds = append(ds, d) // a producer retry wrote it twice
		}
	}
	produceAll(t, broker, topic, ds)
	analytics, ch := usageSink(t) // both aggregators write usage to ClickHouse too

	// The first aggregator dies right after its first Redis apply.
	a, _ := NewKafka(Config{Brokers: []string{broker}, Topic: topic, Group: group, BatchSize: 7, Analytics: analytics}, store)
	killed := make(chan struct{})
	var once sync.Once
	a.afterApply = func() {
		once.Do(func() { close(killed) })
		select {} // never commits: the process is gone
	}
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-killed:
	case <-time.After(60 * time.Second):
		t.Fatal("first aggregator applied nothing")
	}
	a.cons.Close(ctx) // its connection goes away; the group rebalances

	b, _ := NewKafka(Config{Brokers: []string{broker}, Topic: topic, Group: group, BatchSize: 3, Analytics: analytics}, store)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Stop(ctx)
	deadline := time.Now().Add(60 * time.Second)
	for {
		done := true
		for _, k := range keys {
			if total(t, store, k) != want[k] {
				done = false
			}
		}
		if done && b.Stats.Skipped.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, k := range keys {
				t.Logf("%s: redis %d, admitted %d", k, total(t, store, k), want[k])
			}
			t.Fatalf("totals did not converge (applied %d skipped %d)", b.Stats.Applied.Load(), b.Stats.Skipped.Load())
		}
		time.Sleep(50 * time.Millisecond) // integration test: waiting for the real pipeline
	}
	// Drained: nothing more arrives, and the totals stay exact.
	time.Sleep(300 * time.Millisecond)
	for _, k := range keys {
		if got := total(t, store, k); got != want[k] {
			t.Fatalf("%s: redis total %d, admitted %d", k, got, want[k])
		}
	}
	// readiness is re-checked every second: its first check may have run
	// before b joined the group, and b may have drained the topic since
	for ready := time.Now().Add(10 * time.Second); b.Ready() != nil; {
		if time.Now().After(ready) {
			t.Fatal(b.Ready())
		}
		time.Sleep(50 * time.Millisecond) // integration test: the background check's next round
	}
	if lag := b.Lag(); lag != 0 { // a consumer group's reader reports -1 through kafka-go's Lag
		t.Fatalf("consumer lag %d once drained, want 0", lag)
	}
	// ClickHouse counts each delta once too: 20 allowed requests per key.
	if err := analytics.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := allowedIn(t, ch); got["api:k"] != 60 {
		t.Fatalf("ClickHouse allowed requests: %v, want 60", got)
	}
	top, err := ch.Rules(ctx, sink.RulesQuery{Since: time.Unix(0, 0)})
	if err != nil || len(top) != 1 || top[0].Denied != 0 || top[0].DenyRate != 0 {
		t.Fatalf("rules: %+v %v", top, err)
	}
}

// TestKafkaAggregatorSpillReplay: a checker that crashed during an outage
// replays its whole spill file at the next start, also the deltas Kafka
// had already received. The aggregator applies each delta once.
func TestKafkaAggregatorSpillReplay(t *testing.T) {
	broker, raddr := testsvc.Kafka(t), testsvc.Redis(t)
	topic, group := testsvc.Unique("spill"), testsvc.Unique("grp")
	rc := redis.NewClient(&redis.Options{Addr: raddr})
	defer rc.Close()
	store := counters.NewRedis(rc, testsvc.Unique("sp"), 0)
	ctx := context.Background()

	var ds []*eventsv1.Delta
	var want int64
	for i := range 30 {
		d := &eventsv1.Delta{InstanceId: "c/9", Sequence: uint64(i + 1), Domain: "api", RuleId: "api:k",
			CounterKey: "api:k|k=s", Algorithm: "fixed_window", WindowStartUnixNanos: w0, WindowNanos: 60e9, Limit: 1000,
			AllowedCount: 1, AllowedCost: 2, CountedCost: 2, FirstUnixNanos: w0 + 1, LastUnixNanos: w0 + 1}
		want += 2
		ds = append(ds, d)
	}
	produceAll(t, broker, topic, ds[:20]) // these reached Kafka before the crash

	// The spill file holds all 30: the first 20 were replayed once already
	// but the process died before it could truncate the file.
	spillPath := t.TempDir() + "/spill"
	sp, err := events.OpenSpill(spillPath, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	payloads := make([][]byte, len(ds))
	for i, d := range ds {
		payloads[i], _ = events.Encode(d)
	}
	sp.Append(payloads)
	sp.Close()
	p, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 3,
		SpillPath: spillPath, ReplayInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.Start(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for p.SpillRecords() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // integration test: the replay loop talks to the real broker
	}
	p.Close(ctx)

	a, _ := NewKafka(Config{Brokers: []string{broker}, Topic: topic, Group: group, BatchSize: 4}, store)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Stop(ctx)
	for deadline := time.Now().Add(60 * time.Second); ; {
		if a.Stats.Applied.Load() == 30 && a.Stats.Skipped.Load() == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied %d skipped %d, want 30 and 20", a.Stats.Applied.Load(), a.Stats.Skipped.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := total(t, store, "api:k|k=s"); got != want {
		t.Fatalf("redis total %d, want %d", got, want)
	}
}

// TestKafkaAggregatorRollingUpgrade: a fleet mid-upgrade writes both
// schemas to one topic — checkers of the version before one v1 record a
// delta (raw, as they did), upgraded ones v2 records packing many, with
// copies in both. The aggregator applies every delta once, whatever its
// record's schema.
func TestKafkaAggregatorRollingUpgrade(t *testing.T) {
	broker, raddr := testsvc.Kafka(t), testsvc.Redis(t)
	topic, group := testsvc.Unique("upgrade"), testsvc.Unique("grp")
	rc := redis.NewClient(&redis.Options{Addr: raddr})
	defer rc.Close()
	store := counters.NewRedis(rc, testsvc.Unique("up"), 0)
	ctx := context.Background()
	if err := events.EnsureTopic(ctx, events.Security{}, []string{broker}, topic, 3, 1); err != nil {
		t.Fatal(err)
	}
	keys := []string{"api:k|k=a", "api:k|k=b", "api:k|k=c", "api:k|k=d"}
	want := map[string]int64{}
	mk := func(inst string, seq uint64, key string, cost uint64) *eventsv1.Delta {
		want[key] += int64(cost)
		return &eventsv1.Delta{InstanceId: inst, Sequence: seq, Domain: "api", RuleId: "api:k",
			CounterKey: key, Algorithm: "fixed_window", WindowStartUnixNanos: w0, WindowNanos: 60e9, Limit: 100000,
			AllowedCount: 1, AllowedCost: cost, CountedCost: cost, FirstUnixNanos: w0 + 1, LastUnixNanos: w0 + 1}
	}
	// the old checker: one v1 record a delta, keyed by counter key, a few twice
	old := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topic, Balancer: &kafka.Murmur2Balancer{Consistent: true},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond}
	var msgs []kafka.Message
	for i := range 40 {
		d := mk("old/1", uint64(i+1), keys[i%4], uint64(i%3+1))
		v, err := events.Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		m := kafka.Message{Key: []byte(d.CounterKey), Value: v, Headers: []kafka.Header{{Key: events.SchemaHeader, Value: []byte(events.SchemaV1)}}}
		msgs = append(msgs, m)
		if i%7 == 0 {
			msgs = append(msgs, m) // a retry's copy
		}
	}
	if err := old.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	old.Close()
	// the upgraded checker: two flushes of packed records; the second
	// repeats part of the first (a retried flush)
	var flush []*eventsv1.Delta
	for i := range 60 {
		flush = append(flush, mk("new/2", uint64(i+1), keys[i%4], 2))
	}
	p, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	p.Start(ctx)
	if err := p.Produce(ctx, flush); err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(ctx, flush[:30]); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Records.Load() > 6 {
		t.Fatalf("%d records for two flushes over 3 partitions", p.Records.Load())
	}

	a, _ := NewKafka(Config{Brokers: []string{broker}, Topic: topic, Group: group, BatchSize: 16}, store)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Stop(ctx)
	for deadline := time.Now().Add(60 * time.Second); ; {
		if a.Stats.Applied.Load() == 100 && a.Stats.Skipped.Load() == 6+30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied %d skipped %d, want 100 and 36", a.Stats.Applied.Load(), a.Stats.Skipped.Load())
		}
		time.Sleep(20 * time.Millisecond) // integration test: the real broker and Redis
	}
	for _, k := range keys {
		if got := total(t, store, k); got != want[k] {
			t.Fatalf("%s: redis total %d, want %d", k, got, want[k])
		}
	}
	if r := a.Stats.Records.Load(); r != uint64(len(msgs))+p.Records.Load() || a.Stats.Bad.Load() != 0 {
		t.Fatalf("aggregator took %d records (%d bad), want %d v1 and %d v2", r, a.Stats.Bad.Load(), len(msgs), p.Records.Load())
	}
}
