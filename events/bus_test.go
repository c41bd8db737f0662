package events

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

func TestMemBus(t *testing.T) {
	ctx := context.Background()
	b, err := NewMemBus(4, 100)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "a", "a", "b"}
	for i, k := range keys {
		if err := b.Produce(ctx, []*eventsv1.Delta{delta(uint64(i+1), k, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(b, nil)
	var got []Message
	seqByKey := map[string][]uint64{}
	for range keys { // one Produce call a delta: one record each
		m, ds, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 {
			t.Fatalf("a record of %d deltas from a Produce of one", len(ds))
		}
		got = append(got, m)
		seqByKey[ds[0].CounterKey] = append(seqByKey[ds[0].CounterKey], ds[0].Sequence)
	}
	// per key (one partition) the order is the production order
	if s := seqByKey["api:user_id|user_id=a"]; len(s) != 3 || s[0] != 1 || s[1] != 4 || s[2] != 5 {
		t.Fatalf("order of key a: %v", s)
	}
	// nothing more: Fetch waits until the context ends
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := b.Fetch(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("empty fetch: %v", err)
	}
	// a consumer that dies before committing sees everything again
	b.Rewind()
	if m, _, err := r.Next(ctx); err != nil || m.Offset != 0 {
		t.Fatalf("after rewind: %v %v", m, err)
	}
	if err := b.Commit(ctx, got...); err != nil {
		t.Fatal(err)
	}
	if b.Pending() != 0 {
		t.Fatalf("pending after commit: %d", b.Pending())
	}
	b.Rewind()
	if _, err := b.Fetch(short); err == nil {
		t.Fatal("committed messages came back")
	}
}

func TestMemBusBoundedAndClosed(t *testing.T) {
	ctx := context.Background()
	b, _ := NewMemBus(1, 2)
	if err := b.Produce(ctx, []*eventsv1.Delta{delta(1, "a", 1), delta(2, "a", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Produce(ctx, []*eventsv1.Delta{delta(3, "a", 1)}); !errors.Is(err, ErrBusFull) {
		t.Fatalf("over the bound: %v", err)
	}
	// a call larger than the bound: refused while others wait, let onto
	// the bus once it is empty (refused, it would be refused for ever)
	big := []*eventsv1.Delta{delta(4, "a", 1), delta(5, "a", 1), delta(6, "a", 1)}
	if err := b.Produce(ctx, big); !errors.Is(err, ErrBusFull) {
		t.Fatalf("a large call beside pending deltas: %v", err)
	}
	for b.Pending() > 0 {
		m, err := b.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Commit(ctx, m)
	}
	if err := b.Produce(ctx, big); err != nil || b.Pending() != 3 {
		t.Fatalf("a large call on an empty bus: %v, pending %d", err, b.Pending())
	}
	b.Close(ctx)
	if _, err := b.Fetch(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("fetch after close: %v", err)
	}
	if _, err := NewMemBus(0, 1); err == nil {
		t.Fatal("zero partitions accepted")
	}
}

func TestReaderSkipsBadRecords(t *testing.T) {
	ctx := context.Background()
	b, _ := NewMemBus(1, 10)
	good, _ := Encode(delta(1, "a", 2))
	b.produceRaw([]Message{{Key: []byte("k"), Value: []byte("garbage")}, {Key: []byte("k"), Value: good},
		{Key: []byte("k"), Value: nil}})
	b.Produce(ctx, []*eventsv1.Delta{delta(2, "a", 3)})
	r := NewReader(b, nil)
	var sum uint64
	for range 2 {
		_, ds, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sum += costOf(ds)
	}
	if sum != 5 || r.Bad() != 2 {
		t.Fatalf("sum %d bad %d, want 5 and 2", sum, r.Bad())
	}
}

// TestMemBusBoundedInBytes: with LimitBytes, raw records of any size stay
// within the bound in bytes (issue 19, item 7: dev's deferred topic held
// up to 2^20 records of up to 800 KB); committing frees their room.
func TestMemBusBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	b, _ := NewMemBus(2, 1000)
	b.LimitBytes(1000)
	rec := func(k string, n int) Message { return Message{Key: []byte(k), Value: make([]byte, n)} }
	steps := []struct {
		msgs []Message
		full bool
	}{
		{[]Message{rec("a", 499)}, false},                // 500
		{[]Message{rec("b", 299), rec("c", 199)}, false}, // 1000
		{[]Message{rec("d", 0)}, true},                   // one byte over
		{[]Message{rec("", 0)}, false},                   // an empty record holds nothing
		{[]Message{rec("e", 10), rec("f", 5000)}, true},  // all or none
	}
	for i, s := range steps {
		if err := b.Publish(ctx, s.msgs); errors.Is(err, ErrBusFull) != s.full {
			t.Fatalf("step %d: %v, want full %v", i, err, s.full)
		}
	}
	for b.Pending() > 0 {
		m, err := b.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Publish(ctx, []Message{rec("g", 999)}); err != nil {
		t.Fatalf("after every record was committed: %v", err)
	}
}

// TestOneBadDeltaNeverBlocksTheBatch (issue 19, item 3): on every bus, a
// batch holding deltas that can never be delivered (invalid, above
// MaxRecordBytes) delivers the others, returns nil, and counts what it set
// aside; the in-memory bus used to fail the whole batch, which the checker
// then kept ahead of every later delta.
func TestOneBadDeltaNeverBlocksTheBatch(t *testing.T) {
	batch := func() []*eventsv1.Delta {
		invalid := delta(2, "b", 1)
		invalid.Algorithm = "magic"
		tooBig := delta(3, "c", 1)
		tooBig.DescriptorText = strings.Repeat("x", MaxRecordBytes)
		return []*eventsv1.Delta{delta(1, "a", 1), invalid, tooBig, delta(4, "d", 2)}
	}
	ctx := context.Background()
	t.Run("memory", func(t *testing.T) {
		b, _ := NewMemBus(4, 100)
		var logged bytes.Buffer
		b.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
		if err := b.Produce(ctx, batch()); err != nil {
			t.Fatalf("Produce: %v, want nil (the bad deltas set aside)", err)
		}
		if err := b.Produce(ctx, batch()); err != nil {
			t.Fatalf("second Produce: %v", err)
		}
		if got := b.DroppedDeltas(); got != 4 {
			t.Fatalf("dropped %d, want 4 (2 per batch)", got)
		}
		if n := strings.Count(logged.String(), "delta set aside"); n != 1 {
			t.Fatalf("%d log lines for 4 drops, want 1 (at most one per 10 s):\n%s", n, logged.String())
		}
		r := NewReader(b, nil)
		var sum uint64
		for n := 0; n < 4; {
			_, ds, err := r.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sum, n = sum+costOf(ds), n+len(ds)
		}
		if sum != 6 || b.Pending() != 4 {
			t.Fatalf("delivered cost %d in %d deltas, want 6 in 4", sum, b.Pending())
		}
	})
	t.Run("kafka", func(t *testing.T) {
		broker := testsvc.Kafka(t)
		topic := testsvc.Unique("bad")
		p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Produce(ctx, batch()); err != nil {
			t.Fatalf("Produce: %v, want nil (the bad deltas set aside)", err)
		}
		if got := p.DroppedDeltas(); got != 2 {
			t.Fatalf("dropped %d, want 2", got)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got, _ := consumeAll(t, broker, topic, 2); got != 3 {
			t.Fatalf("allowed cost in the topic %d, want 3 (the two good deltas)", got)
		}
	})
}

// costOf sums the deltas' allowed cost.
func costOf(ds []*eventsv1.Delta) (sum uint64) {
	for _, d := range ds {
		sum += d.AllowedCost
	}
	return sum
}
