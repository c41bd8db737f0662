package events

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// createTopic makes a topic whose broker-side record bound is maxBytes.
func createTopic(t *testing.T, broker, topic string, maxBytes int) {
	t.Helper()
	conn, err := kafka.Dial("tcp", broker)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctl, err := conn.Controller()
	if err != nil {
		t.Fatal(err)
	}
	cc, err := kafka.Dial("tcp", net.JoinHostPort(ctl.Host, strconv.Itoa(ctl.Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := cc.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(maxBytes)}}}); err != nil {
		t.Fatal(err)
	}
}

// TestUndeliverableDeltasNeverBlock: issue 10, item 5. A delta that is
// invalid, above MaxRecordBytes, or refused by the broker for its size is
// set aside (counted) and the deltas behind it are delivered; with Kafka
// down, it never enters the spill file, where it would stall the replay.
func TestUndeliverableDeltasNeverBlock(t *testing.T) {
	broker := testsvc.Kafka(t)
	topic := testsvc.Unique("drop")
	createTopic(t, broker, topic, 4096) // the broker refuses records above 4 KiB
	p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 1,
		SpillPath: filepath.Join(t.TempDir(), "spill"), Compression: "none"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	invalid := delta(2, "b", 1)
	invalid.InstanceId = ""
	tooBig := delta(3, "c", 1)
	tooBig.DescriptorText = strings.Repeat("x", MaxRecordBytes)
	brokerRefuses := delta(4, "d", 1)
	brokerRefuses.DescriptorText = strings.Repeat("y", 8<<10) // fits our bound, not this topic's
	steps := []*eventsv1.Delta{delta(1, "a", 1), invalid, tooBig, brokerRefuses, delta(5, "e", 1)}
	for i, d := range steps {
		if err := p.Produce(ctx, []*eventsv1.Delta{d}); err != nil {
			t.Fatalf("step %d: Produce returned %v; an undeliverable delta must not fail the call", i, err)
		}
	}
	if got := p.Dropped.Load(); got != 3 {
		t.Fatalf("dropped %d, want 3", got)
	}
	if p.SpillRecords() != 0 {
		t.Fatalf("%d records spilled; the broker was up", p.SpillRecords())
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := consumeAll(t, broker, topic, 2); got != 2 {
		t.Fatalf("allowed cost in the topic %d, want the 2 deliverable deltas", got)
	}
}

// TestOversizedDeltaNeverEntersTheSpill: Kafka unreachable; the spill
// takes the good deltas and the oversized one is set aside.
func TestOversizedDeltaNeverEntersTheSpill(t *testing.T) {
	p, err := NewKafkaProducer(KafkaConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "t",
		SpillPath: filepath.Join(t.TempDir(), "spill"), WriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := delta(2, "b", 1)
	big.CounterKey = strings.Repeat("k", MaxRecordBytes)
	for i, ds := range [][]*eventsv1.Delta{{delta(1, "a", 1)}, {big, delta(3, "c", 1)}} {
		if err := p.Produce(ctx, ds); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if p.SpillRecords() != 2 || p.Dropped.Load() != 1 {
		t.Fatalf("spilled %d (want 2), dropped %d (want 1)", p.SpillRecords(), p.Dropped.Load())
	}
	_ = p.Close(ctx)
}
