package events

import (
	"context"
	"os/exec"
	"path/filepath"
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
		m, d, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("consumed %d of %d deltas: %v", len(seen), want, err)
		}
		id := [2]any{d.InstanceId, d.Sequence}
		if seen[id] {
			dups++
		} else {
			seen[id] = true
			sum += d.AllowedCost
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
	if len(lines) != n || !strings.HasPrefix(lines[0], "api:user_id|user_id=") || !strings.Contains(lines[0], SchemaHeader+"="+SchemaV1) {
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
