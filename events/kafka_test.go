package events

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// consumeAll reads topic with a fresh consumer group until want distinct
// (instance, sequence) pairs arrived, and returns the allowed cost summed
// over distinct pairs and the number of copies dropped.
func consumeAll(t *testing.T, broker, topic string, want int) (sum uint64, dups int) {
	t.Helper()
	c, err := NewKafkaConsumer(KafkaConsumerConfig{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	r := NewReader(c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	seen := map[[2]any]bool{}
	for len(seen) < want {
		m, ds, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("consumed %d of %d deltas: %v", len(seen), want, err)
		}
		for _, d := range ds {
			id := [2]any{d.InstanceId, d.Sequence}
			if seen[id] {
				dups++
			} else {
				seen[id] = true
				sum += d.AllowedCost
			}
		}
		if err := r.Commit(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	return sum, dups
}

func TestKafkaProduceConsume(t *testing.T) {
	broker := testsvc.Kafka(t)
	topic := testsvc.Unique("deltas")
	p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var want uint64
	const n = 200
	for i := range n {
		d := delta(uint64(i+1), []string{"a", "b", "c", "d", "e"}[i%5], uint64(i%3+1))
		want += d.AllowedCost
		if err := p.Produce(ctx, []*eventsv1.Delta{d}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := consumeAll(t, broker, topic, n); got != want {
		t.Fatalf("allowed cost in the topic %d, want %d", got, want)
	}
	// a standard Kafka client reads the same topic
	out, err := exec.Command("kcat", "-C", "-b", broker, "-t", topic, "-e", "-q", "-f", "%k %h\n").Output()
	if err != nil {
		t.Fatalf("kcat (installed by scripts/services.sh): %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != n || !strings.HasPrefix(lines[0], "api:user_id|user_id=") || !strings.Contains(lines[0], SchemaHeader+"="+SchemaV2) {
		t.Fatalf("kcat read %d records, first %q", len(lines), lines[0])
	}
}

// TestKafkaOutageSpillsAndReplays stops a private broker (the shared one is
// untouched), keeps producing into the spill file, restarts the broker and
// checks that after replay the topic holds exactly what was produced.
func TestKafkaOutageSpillsAndReplays(t *testing.T) {
	pk := testsvc.StartPrivateKafka(t)
	topic := testsvc.Unique("outage")
	p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{pk.Addr}, Topic: topic, Partitions: 2,
		SpillPath: filepath.Join(t.TempDir(), "spill"), ReplayInterval: 200 * time.Millisecond,
		WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.Start(ctx)
	var want uint64
	seq := uint64(0)
	produce := func(n int) {
		for range n {
			seq++
			d := delta(seq, []string{"a", "b", "c"}[seq%3], seq%4+1)
			want += d.AllowedCost
			if err := p.Produce(ctx, []*eventsv1.Delta{d}); err != nil {
				t.Fatalf("produce %d: %v", seq, err)
			}
		}
	}
	produce(50)
	pk.Stop(t)
	produce(50) // Kafka is down: these must spill, and Produce still succeeds
	if p.SpillRecords() == 0 {
		t.Fatal("nothing spilled during the outage")
	}
	pk.Start(t)
	drain := func() {
		deadline := time.Now().Add(60 * time.Second)
		for p.SpillRecords() > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // integration test: waiting for a real broker
		}
	}
	drain()
	// Right after a restart a partition may still be electing its leader:
	// such writes spill too, and the replay loop sends them shortly after.
	produce(50)
	drain()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if p.SpillRecords() != 0 {
		t.Fatalf("%d deltas still spilled after recovery", p.SpillRecords())
	}
	got, dups := consumeAll(t, pk.Addr, topic, int(seq))
	if got != want {
		t.Fatalf("allowed cost after dropping %d duplicates: %d, want %d", dups, got, want)
	}
	t.Logf("outage: %d deltas, %d copies dropped, spilled %d", seq, dups, p.Spilled.Load())
}

// TestKafkaPacksAPartitionPerRecord: one Produce of many keys' deltas
// costs one record per partition, each record lands in the partition
// murmur2 gives its deltas' counter keys, and every delta arrives once.
func TestKafkaPacksAPartitionPerRecord(t *testing.T) {
	broker := testsvc.Kafka(t)
	topic := testsvc.Unique("packed")
	p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var ds []*eventsv1.Delta
	var want uint64
	for i := range n {
		d := delta(uint64(i+1), strconv.Itoa(i), uint64(i%3+1))
		want += d.AllowedCost
		ds = append(ds, d)
	}
	if err := p.Produce(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Produced.Load() != n || p.Records.Load() > 4 {
		t.Fatalf("%d deltas in %d records, want %d in at most 4", p.Produced.Load(), p.Records.Load(), n)
	}
	c, err := NewKafkaConsumer(KafkaConsumerConfig{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	r := NewReader(c, nil)
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var got, sum uint64
	for got < n {
		m, ds, err := r.Next(rctx)
		if err != nil {
			t.Fatalf("read %d of %d deltas: %v", got, n, err)
		}
		for _, d := range ds {
			if part := murmur2Partition([]byte(d.CounterKey), 4); part != m.Partition {
				t.Fatalf("%s in partition %d, murmur2 gives %d", d.CounterKey, m.Partition, part)
			}
			got, sum = got+1, sum+d.AllowedCost
		}
	}
	if got != n || sum != want {
		t.Fatalf("%d deltas of cost %d, want %d of %d", got, sum, n, want)
	}
}

// TestKafkaSplitsARecordTheBrokerRefusesAsTooLarge: on a topic whose
// max.message.bytes is below a flush's record, the producer splits until
// the broker takes them: nothing is set aside, every delta arrives once,
// and later flushes are packed within what the broker took.
func TestKafkaSplitsARecordTheBrokerRefusesAsTooLarge(t *testing.T) {
	broker := testsvc.Kafka(t)
	topic := testsvc.Unique("small")
	createTopic(t, broker, topic, 20000)
	p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 1, Compression: "none"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	flush := func() {
		var ds []*eventsv1.Delta
		for range 1000 { // about 150 KB packed
			seq++
			ds = append(ds, delta(seq, strconv.FormatUint(seq, 10), 1))
		}
		if err := p.Produce(ctx, ds); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	errorsAfterFirst := p.KafkaErrors.Load()
	flush()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Dropped.Load() != 0 || p.Produced.Load() != seq || errorsAfterFirst == 0 {
		t.Fatalf("dropped %d, produced %d of %d, refusals %d (want some: the first record was too large)",
			p.Dropped.Load(), p.Produced.Load(), seq, errorsAfterFirst)
	}
	if p.KafkaErrors.Load() != errorsAfterFirst {
		t.Fatalf("the second flush was refused again (%d refusals): packing did not learn the bound", p.KafkaErrors.Load()-errorsAfterFirst)
	}
	if got, dups := consumeAll(t, broker, topic, int(seq)); got != seq || dups != 0 {
		t.Fatalf("allowed cost %d with %d copies, want %d and none", got, dups, seq)
	}
}

// TestKafkaReplaysASpillOfBothSchemas: a spill file left by the version
// before (v1 records, one delta each) and records of this one are
// replayed in order when the producer starts, packed again.
func TestKafkaReplaysASpillOfBothSchemas(t *testing.T) {
	broker := testsvc.Kafka(t)
	topic := testsvc.Unique("spill2")
	path := filepath.Join(t.TempDir(), "spill")
	s, err := OpenSpill(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	var payloads [][]byte
	for i := range 5 { // the old version's records
		v, _ := Encode(delta(uint64(i+1), "old"+strconv.Itoa(i), 2))
		payloads = append(payloads, v)
	}
	var packed []byte
	for i := 5; i < 10; i++ { // and a packed one
		v, _ := Encode(delta(uint64(i+1), "new", 3))
		packed = AppendPacked(packed, v)
	}
	payloads = append(payloads, packed)
	for i := 10; i < 1010; i++ { // a hot key's flushes during an outage: a record each
		v, _ := Encode(delta(uint64(i+1), "hot", 1))
		payloads = append(payloads, AppendPacked(nil, v))
	}
	if err := s.Append(payloads); err != nil {
		t.Fatal(err)
	}
	s.Close()
	p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 2, SpillPath: path,
		ReplayInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil { // Close replays what is left
		t.Fatal(err)
	}
	// re-packed by the topic's partitions, and written in rounds by
	// bytes: a record a partition and replay batch (of 1,000 spill
	// records: two here), not 1,000 writes in a row for the hot key
	if p.SpillRecords() != 0 || p.Produced.Load() != 1010 || p.Records.Load() > 4 {
		t.Fatalf("spill left %d records; produced %d deltas in %d records, want 1010 in at most 4", p.SpillRecords(), p.Produced.Load(), p.Records.Load())
	}
	if got, _ := consumeAll(t, broker, topic, 1010); got != 5*2+5*3+1000 {
		t.Fatalf("allowed cost %d, want %d", got, 5*2+5*3+1000)
	}
}

// TestKafkaPacksOnlyOnceThePartitionsAreKnown: a producer that never
// reached the topic at start (configured with 2 partitions, the topic has
// 8) sends one delta a record, each placed by its own key; once a write
// taught it the topic's 8 partitions it packs by them. Every delta lands
// in the partition murmur2 gives its key over the real count.
func TestKafkaPacksOnlyOnceThePartitionsAreKnown(t *testing.T) {
	broker := testsvc.Kafka(t)
	topic := testsvc.Unique("parts")
	if err := EnsureTopic(context.Background(), Security{}, []string{broker}, topic, 8, 1); err != nil {
		t.Fatal(err)
	}
	p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background() // no Start: as when Kafka did not answer then
	flush := func(from int) {
		var ds []*eventsv1.Delta
		for i := from; i < from+200; i++ {
			ds = append(ds, delta(uint64(i+1), strconv.Itoa(i), 1))
		}
		if err := p.Produce(ctx, ds); err != nil {
			t.Fatal(err)
		}
	}
	flush(0)
	if p.Records.Load() != 200 {
		t.Fatalf("%d records for 200 deltas before the partitions were known, want 200", p.Records.Load())
	}
	flush(200)
	if got := p.Records.Load() - 200; got > 8 {
		t.Fatalf("%d records for the second flush, want at most 8", got)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := NewKafkaConsumer(KafkaConsumerConfig{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	r := NewReader(c, nil)
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for got := 0; got < 400; {
		m, ds, err := r.Next(rctx)
		if err != nil {
			t.Fatalf("read %d of 400: %v", got, err)
		}
		for _, d := range ds {
			if want := murmur2Partition([]byte(d.CounterKey), 8); m.Partition != want {
				t.Fatalf("%s in partition %d, its key reaches %d", d.CounterKey, m.Partition, want)
			}
		}
		got += len(ds)
	}
}
