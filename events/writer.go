package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// WriterConfig configures a KafkaWriter.
type WriterConfig struct {
	Brokers           []string
	Topic             string
	Partitions        int // when creating the topic; default 16
	ReplicationFactor int // when creating the topic; default 1
	// BatchTimeout is how long the writer waits for more records of the
	// same partition before sending; default 2 ms (a deferred request's
	// answer waits for it).
	BatchTimeout time.Duration
	WriteTimeout time.Duration // one attempt; default 3 s
	Security     Security
}

// MaxPublishBytes bounds one record a KafkaWriter sends: under Kafka's
// default message.max.bytes (1 MiB) with room for the batch's framing.
const MaxPublishBytes = 960 << 10

// KafkaWriter is a [Publisher] on a Kafka topic: records keyed by the
// caller (murmur2 partitioning, so one key's records stay in order on one
// partition), acknowledged by all in-sync replicas. The topic is created
// on first use when missing.
type KafkaWriter struct {
	cfg WriterConfig
	w   *kafka.Writer

	mu    sync.Mutex
	ready bool // the topic exists
}

// NewKafkaWriter returns a writer; nothing is dialled before the first
// Publish.
func NewKafkaWriter(cfg WriterConfig) (*KafkaWriter, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return nil, errors.New("events: kafka writer needs brokers and a topic")
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 16
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = 1
	}
	if cfg.BatchTimeout == 0 {
		cfg.BatchTimeout = 2 * time.Millisecond
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 3 * time.Second
	}
	if cfg.Partitions < 1 || cfg.ReplicationFactor < 1 {
		return nil, fmt.Errorf("events: partitions %d and replication factor %d must be >= 1", cfg.Partitions, cfg.ReplicationFactor)
	}
	tr := cfg.Security.transport()
	// a topic's metadata is cached this long, a missing topic's too: short,
	// so that a topic another process just created is found soon
	tr.MetadataTTL = 500 * time.Millisecond
	// a batch must pass the broker's message.max.bytes (1 MiB)
	return &KafkaWriter{cfg: cfg, w: newWriter(cfg.Brokers, cfg.Topic, kafka.Lz4, cfg.BatchTimeout, cfg.WriteTimeout, 128, 1<<20, tr)}, nil
}

// Topic is the topic written to.
func (k *KafkaWriter) Topic() string { return k.cfg.Topic }

// Publish implements [Publisher]. Records larger than MaxPublishBytes are
// refused before anything is sent.
func (k *KafkaWriter) Publish(ctx context.Context, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	km := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		if len(m.Key)+len(m.Value) > MaxPublishBytes {
			return fmt.Errorf("events: record of %d bytes for %s exceeds %d", len(m.Key)+len(m.Value), k.cfg.Topic, MaxPublishBytes)
		}
		km[i] = kafka.Message{Key: m.Key, Value: m.Value}
	}
	if err := k.ensure(ctx); err != nil {
		return err
	}
	// A topic just created is unknown to the brokers' metadata for a
	// moment: that answer is retried for up to 5 s.
	var err error
	for wait, waited := 50*time.Millisecond, time.Duration(0); ; wait *= 2 {
		if err = k.w.WriteMessages(ctx, km...); err == nil {
			return nil
		}
		if !errors.Is(err, kafka.UnknownTopicOrPartition) && !errors.Is(err, kafka.LeaderNotAvailable) || waited >= 5*time.Second {
			break
		}
		select {
		case <-time.After(wait):
			waited += wait
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("events: write %d records to %s: %w", len(km), k.cfg.Topic, err)
}

func (k *KafkaWriter) ensure(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ready {
		return nil
	}
	if err := EnsureTopic(ctx, k.cfg.Security, k.cfg.Brokers, k.cfg.Topic, k.cfg.Partitions, k.cfg.ReplicationFactor); err != nil {
		return err
	}
	k.ready = true
	return nil
}

// Close implements [Publisher], flushing what is pending.
func (k *KafkaWriter) Close(context.Context) error { return k.w.Close() }
