package events

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// TestKafkaWriterPublishes: records written to a topic that does not
// exist yet (created on first use) come back through a consumer group in
// order per key, as written; a record above MaxPublishBytes is refused
// before anything is sent.
func TestKafkaWriterPublishes(t *testing.T) {
	broker := testsvc.Kafka(t)
	topic := testsvc.Unique("raw")
	w, err := NewKafkaWriter(WriterConfig{Brokers: []string{broker}, Topic: topic, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var want []Message
	for i := range 20 {
		want = append(want, Message{Key: []byte("k" + string(rune('a'+i%3))), Value: []byte{byte(i)}})
	}
	if err := w.Publish(ctx, want); err != nil {
		t.Fatal(err)
	}
	big := Message{Key: []byte("k"), Value: bytes.Repeat([]byte("x"), MaxPublishBytes)}
	if err := w.Publish(ctx, []Message{big}); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("oversized record: %v", err)
	}
	c, err := NewKafkaConsumer(KafkaConsumerConfig{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	got := map[string][]byte{}
	for range want {
		m, err := c.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[string(m.Key)] = append(got[string(m.Key)], m.Value...)
	}
	for _, m := range want {
		k := string(m.Key)
		if len(got[k]) == 0 || got[k][0] != m.Value[0] {
			t.Fatalf("key %s: got %v, records out of order or missing", k, got[k])
		}
		got[k] = got[k][1:]
	}
}
