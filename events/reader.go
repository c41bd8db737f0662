package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/logx"
)

// Reader decodes the records of a Consumer, v1 and v2 alike. A record
// that does not decode is counted, logged with its partition and offset
// (at most one line per 10 s), and skipped: it never stops the consumer (its offset is covered by the
// next commit of its partition, so it is not fetched again); so is an
// invalid delta in an otherwise readable v2 record, whose others are
// returned.
type Reader struct {
	c   Consumer
	log *logx.Limited
	bad atomic.Uint64
}

// NewReader returns a Reader over c.
func NewReader(c Consumer, logger *slog.Logger) *Reader {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Reader{c: c, log: logx.New(logger, 10*time.Second)}
}

// Next returns the next record holding a valid delta, and its deltas
// (one for a v1 record, the pack's for v2): a record is processed whole,
// so its offset is committed only once all of them are applied.
func (r *Reader) Next(ctx context.Context) (Message, []*eventsv1.Delta, error) {
	for {
		m, err := r.c.Fetch(ctx)
		if err != nil {
			return m, nil, err
		}
		ds, bad, badErr, err := DecodeRecord(m.Value)
		if err != nil {
			r.bad.Add(1)
			r.log.Warn("skipping a malformed record", "partition", m.Partition, "offset", m.Offset, "error", err)
			continue
		}
		if bad > 0 {
			r.bad.Add(uint64(bad))
			r.log.Warn("skipping malformed deltas of a record", "partition", m.Partition, "offset", m.Offset,
				"deltas", bad, "kept", len(ds), "error", badErr)
		}
		if len(ds) > 0 {
			return m, ds, nil
		}
	}
}

// Commit commits msgs through the underlying consumer.
func (r *Reader) Commit(ctx context.Context, msgs ...Message) error { return r.c.Commit(ctx, msgs...) }

// Bad returns how many records, and deltas of v2 records, were skipped as
// malformed.
func (r *Reader) Bad() uint64 { return r.bad.Load() }

// KafkaConsumer is a Consumer over a kafka-go consumer group reader.
type KafkaConsumer struct {
	r        *kafka.Reader
	cfg      KafkaConsumerConfig
	clientID string
	admin    *kafka.Client
}

// KafkaConsumerConfig configures a KafkaConsumer. Zero durations take
// defaults chosen for fast failover: a dead consumer's partitions move
// within seconds.
type KafkaConsumerConfig struct {
	Brokers           []string
	Topic, Group      string
	SessionTimeout    time.Duration // default 6 s
	HeartbeatInterval time.Duration // default 1 s
	RebalanceTimeout  time.Duration // default 6 s
	MaxWait           time.Duration // longest fetch wait; default 1 s
	Security          Security      // TLS and SASL (zero: plaintext)
}

// NewKafkaConsumer joins cfg.Group on cfg.Topic, starting from the
// earliest offset when the group has none.
func NewKafkaConsumer(cfg KafkaConsumerConfig) (*KafkaConsumer, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" || cfg.Group == "" {
		return nil, errors.New("events: kafka consumer needs brokers, a topic and a group")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.SessionTimeout, 6*time.Second)
	def(&cfg.HeartbeatInterval, time.Second)
	def(&cfg.RebalanceTimeout, 6*time.Second)
	// A fetch returns as soon as a record is there (MinBytes 1), so the
	// wait only bounds how often an idle partition is polled: at 100 ms an
	// idle aggregator of 16 partitions cost the broker a tenth of a core.
	// A rebalance or a stop waits for the fetches in flight, so at most
	// this much longer.
	def(&cfg.MaxWait, time.Second)
	// a client id of this consumer's own, so that Membership can find it
	// among the group's members
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	clientID := "velvetrope-" + hex.EncodeToString(nonce[:])
	dialer := cfg.Security.dialer(10 * time.Second)
	dialer.ClientID = clientID
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: cfg.Brokers, Topic: cfg.Topic, GroupID: cfg.Group, StartOffset: kafka.FirstOffset,
		SessionTimeout: cfg.SessionTimeout, HeartbeatInterval: cfg.HeartbeatInterval,
		RebalanceTimeout: cfg.RebalanceTimeout, MaxWait: cfg.MaxWait, MinBytes: 1, MaxBytes: 8 << 20,
		CommitInterval: 0, // synchronous commits: an offset is committed only when asked
		Dialer:         dialer,
	})
	return &KafkaConsumer{r: r, cfg: cfg, clientID: clientID,
		admin: &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: 3 * time.Second, Transport: cfg.Security.transport()}}, nil
}

// Membership asks the group coordinator whether this consumer is a member
// of its group now, and in which state the group is ("Stable",
// "PreparingRebalance", ...). A member with no partitions (more consumers
// than partitions) is a member. An error means the coordinator could not
// be asked.
func (c *KafkaConsumer) Membership(ctx context.Context) (member bool, state string, err error) {
	resp, err := c.admin.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{c.cfg.Group}})
	if err != nil {
		return false, "", fmt.Errorf("events: describe group %s: %w", c.cfg.Group, err)
	}
	if len(resp.Groups) == 0 {
		return false, "", nil
	}
	g := resp.Groups[0] // one group asked, one answered
	if g.Error != nil {
		return false, "", fmt.Errorf("events: describe group %s: %w", c.cfg.Group, g.Error)
	}
	for _, m := range g.Members {
		if m.ClientID == c.clientID {
			return true, g.GroupState, nil
		}
	}
	return false, g.GroupState, nil
}

// Fetch implements [Consumer].
func (c *KafkaConsumer) Fetch(ctx context.Context) (Message, error) {
	m, err := c.r.FetchMessage(ctx)
	if err != nil {
		return Message{}, err
	}
	return Message{Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value}, nil
}

// Commit implements [Consumer].
func (c *KafkaConsumer) Commit(ctx context.Context, msgs ...Message) error {
	km := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		km[i] = kafka.Message{Topic: c.r.Config().Topic, Partition: m.Partition, Offset: m.Offset}
	}
	return c.r.CommitMessages(ctx, km...)
}

// Close implements [Consumer].
func (c *KafkaConsumer) Close(context.Context) error { return c.r.Close() }

// Lag returns how many messages the consumer was behind the end of a
// partition at the last message it read (kafka-go's reader statistics:
// its Lag method answers -1 for a consumer group, always).
func (c *KafkaConsumer) Lag() int64 { return c.r.Stats().Lag }
