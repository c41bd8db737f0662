package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/logx"
)

// KafkaConfig configures a KafkaProducer.
type KafkaConfig struct {
	Brokers           []string
	Topic             string
	Partitions        int // when creating the topic; default 16
	ReplicationFactor int // when creating the topic; default 1
	// Compression: "lz4" (default), "zstd", "snappy", "gzip" or "none".
	// lz4 is the default for CPU: under the Envoy API benchmark kafka-go's
	// zstd encoder cost the checker a third of its throughput; zstd saves
	// bytes on the wire where the network, not the CPU, is scarce.
	Compression  string
	BatchTimeout time.Duration // how long the writer waits to fill a batch; default 5 ms
	WriteTimeout time.Duration // one attempt; default 3 s
	// SpillPath is the spill file; empty disables spilling (Produce then
	// fails while Kafka is unreachable). SpillMaxBytes bounds it (default
	// 256 MiB).
	SpillPath     string
	SpillMaxBytes int64
	// ReplayInterval is how often spilled records are retried; default 1 s.
	ReplayInterval time.Duration
	// Security is TLS and SASL towards the brokers (zero: plaintext).
	Security Security
	Logger   *slog.Logger
}

func (c *KafkaConfig) defaults() error {
	if len(c.Brokers) == 0 || c.Topic == "" {
		return errors.New("events: kafka producer needs brokers and a topic")
	}
	if c.Partitions == 0 {
		c.Partitions = 16
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 1
	}
	if c.Compression == "" {
		c.Compression = "lz4"
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = 5 * time.Millisecond
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 3 * time.Second
	}
	if c.SpillMaxBytes == 0 {
		c.SpillMaxBytes = 256 << 20
	}
	if c.ReplayInterval == 0 {
		c.ReplayInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Partitions < 1 || c.ReplicationFactor < 1 {
		return fmt.Errorf("events: partitions %d and replication factor %d must be >= 1", c.Partitions, c.ReplicationFactor)
	}
	return nil
}

func compression(name string) (kafka.Compression, error) {
	switch name {
	case "zstd":
		return kafka.Zstd, nil
	case "lz4":
		return kafka.Lz4, nil
	case "snappy":
		return kafka.Snappy, nil
	case "gzip":
		return kafka.Gzip, nil
	case "none":
		return 0, nil
	}
	return 0, fmt.Errorf("events: unknown compression %q (zstd, lz4, snappy, gzip or none)", name)
}

// newWriter is the kafka-go writer every velvetrope producer uses: keyed
// records (murmur2, as the Java client: one key, one partition),
// acknowledged by all in-sync replicas, three attempts with backoff.
func newWriter(brokers []string, topic string, comp kafka.Compression, batchTimeout, writeTimeout time.Duration,
	batchSize int, batchBytes int64, tr *kafka.Transport) *kafka.Writer {
	return &kafka.Writer{
		Addr:            kafka.TCP(brokers...),
		Topic:           topic,
		Balancer:        &kafka.Murmur2Balancer{Consistent: true},
		RequiredAcks:    kafka.RequireAll,
		Compression:     comp,
		BatchTimeout:    batchTimeout,
		BatchSize:       batchSize,
		BatchBytes:      batchBytes,
		WriteTimeout:    writeTimeout,
		ReadTimeout:     writeTimeout,
		MaxAttempts:     3,
		WriteBackoffMin: 50 * time.Millisecond,
		WriteBackoffMax: 500 * time.Millisecond,
		Transport:       tr,
	}
}

// KafkaProducer sends deltas to a Kafka topic, one message per delta keyed
// by counter key (murmur2 partitioning, as the Java client: one key always
// reaches one partition, so one aggregator), compressed, acknowledged by
// all in-sync replicas. Calls are serialised, so per-partition order is the
// order of Produce calls.
//
// While Kafka is unreachable, deltas go to the spill file and Produce
// still succeeds; from then on every delta goes to the spill, behind the
// ones already there, until a replay has sent them all: order per partition
// is kept, which the aggregator's (instance, sequence) filter relies on.
type KafkaProducer struct {
	cfg   KafkaConfig
	w     *kafka.Writer
	spill *Spill
	mu    sync.Mutex // serialises writes and replays

	topicReady atomic.Bool
	stop       chan struct{}
	done       chan struct{}

	// Counters for metrics.
	Produced atomic.Uint64 // deltas acknowledged by Kafka (directly or by replay)
	Spilled  atomic.Uint64 // deltas written to the spill file
	Failed   atomic.Uint64 // Produce calls that returned an error
	// KafkaErrors counts writes Kafka refused in part or whole (the
	// deltas went to the spill file, or Failed counts them).
	KafkaErrors atomic.Uint64
	// Dropped counts deltas set aside for good: invalid, larger than
	// MaxRecordBytes, or refused by the broker for what they are (message
	// too large, invalid record). Retrying them could only block the
	// deltas behind them; each is logged (at most one line per 10 s).
	Dropped atomic.Uint64

	dropLog *logx.Limited
}

// NewKafkaProducer returns a producer; Start creates the topic and starts
// the replay loop.
func NewKafkaProducer(cfg KafkaConfig) (*KafkaProducer, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	comp, err := compression(cfg.Compression)
	if err != nil {
		return nil, err
	}
	p := &KafkaProducer{cfg: cfg, dropLog: logx.New(cfg.Logger, 10*time.Second)}
	// kafka-go sizes every partition's batch for BatchSize messages when
	// it starts one: at 4096 that was 700 KB per partition per flush, two
	// thirds of the checker's allocations. A flush hands over at most 2048
	// deltas, about 128 per partition of 16.
	p.w = newWriter(cfg.Brokers, cfg.Topic, comp, cfg.BatchTimeout, cfg.WriteTimeout, 256, 4<<20, p.cfg.Security.transport())
	if cfg.SpillPath != "" {
		if p.spill, err = OpenSpill(cfg.SpillPath, cfg.SpillMaxBytes, cfg.Logger); err != nil {
			return nil, err
		}
		if n := p.spill.Records(); n > 0 {
			cfg.Logger.Info("spill file holds deltas from an earlier run; they are replayed first", "records", n)
		}
	}
	return p, nil
}

// Start creates the topic if it is missing (when Kafka answers; otherwise
// it keeps trying in the background while deltas spill) and starts the
// replay loop.
func (p *KafkaProducer) Start(ctx context.Context) error {
	if err := p.ensureTopic(ctx); err != nil {
		p.cfg.Logger.Warn("kafka not reachable at start; deltas spill until it is", "error", err)
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.loop()
	return nil
}

func (p *KafkaProducer) loop() {
	defer close(p.done)
	t := time.NewTicker(p.cfg.ReplayInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*p.cfg.WriteTimeout)
			if !p.topicReady.Load() {
				if err := p.ensureTopic(ctx); err != nil {
					cancel()
					continue
				}
			}
			p.mu.Lock()
			err := p.replay(ctx)
			p.mu.Unlock()
			cancel()
			if err != nil {
				p.cfg.Logger.Debug("spill replay deferred", "error", err)
			}
		}
	}
}

// ensureTopic creates the topic unless it exists.
func (p *KafkaProducer) ensureTopic(ctx context.Context) error {
	if p.topicReady.Load() {
		return nil
	}
	if err := EnsureTopic(ctx, p.cfg.Security, p.cfg.Brokers, p.cfg.Topic, p.cfg.Partitions, p.cfg.ReplicationFactor); err != nil {
		return err
	}
	p.topicReady.Store(true)
	return nil
}

// EnsureTopic creates topic with the given partitions and replication on
// the cluster at brokers, unless it exists.
func EnsureTopic(ctx context.Context, sec Security, brokers []string, topic string, partitions, replication int) error {
	d := sec.dialer(3 * time.Second)
	var conn *kafka.Conn
	var err error
	for _, b := range brokers {
		if conn, err = d.DialContext(ctx, "tcp", b); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("no broker answers: %w", err)
	}
	defer conn.Close()
	controller, err := conn.Controller()
	if err != nil {
		return fmt.Errorf("find the controller: %w", err)
	}
	cc, err := d.DialContext(ctx, "tcp", net.JoinHostPort(controller.Host, strconv.Itoa(controller.Port)))
	if err != nil {
		return fmt.Errorf("dial the controller: %w", err)
	}
	defer cc.Close()
	err = cc.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: replication})
	if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	// A topic just created has no partition leaders for a moment; a
	// consumer group joined then gets no partitions at all, and a writer
	// caches the topic as missing. Wait (up to 5 s) until every partition
	// has a leader.
	give := time.Now().Add(5 * time.Second)
	for wait := 20 * time.Millisecond; time.Now().Before(give); wait = min(2*wait, 500*time.Millisecond) {
		ps, err := conn.ReadPartitions(topic)
		ready := err == nil && len(ps) > 0
		for _, p := range ps {
			ready = ready && p.Leader.Host != ""
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("events: topic %s has no partition leaders yet: %w", topic, ctx.Err())
		case <-time.After(wait):
		}
	}
	return nil // kafka-go retries from here
}

// Produce implements [Producer]. A delta that can never be delivered
// (invalid, or above MaxRecordBytes) is counted in Dropped and logged,
// never returned as an error: the caller would retry it forever and hold
// up everything behind it.
func (p *KafkaProducer) Produce(ctx context.Context, deltas []*eventsv1.Delta) error {
	msgs := make([]kafka.Message, 0, len(deltas))
	for _, d := range deltas {
		v, err := encodeDelta(d)
		if err != nil {
			p.drop(d.GetCounterKey(), err)
			continue
		}
		msgs = append(msgs, kafka.Message{Key: []byte(d.CounterKey), Value: v,
			Headers: []kafka.Header{{Key: SchemaHeader, Value: []byte(SchemaV1)}}})
	}
	if len(msgs) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spill != nil && p.spill.Records() > 0 {
		// Queue behind the spilled records; the replay loop drains them in
		// order. (Trying Kafka here would make every flush during an outage
		// wait for a dial timeout.)
		return p.toSpill(msgs)
	}
	failed, err := p.write(ctx, msgs)
	if err == nil {
		return nil
	}
	if p.spill == nil {
		p.Failed.Add(1)
		return fmt.Errorf("events: produce %d deltas: %w", len(failed), err)
	}
	p.cfg.Logger.Warn("kafka write failed; spilling deltas to disk", "deltas", len(failed), "error", err)
	return p.toSpill(failed)
}

// write sends msgs and returns those to try again. Messages the broker
// refused for good are dropped (counted, logged); they never come back.
func (p *KafkaProducer) write(ctx context.Context, msgs []kafka.Message) ([]kafka.Message, error) {
	err := p.w.WriteMessages(ctx, msgs...)
	if err == nil {
		p.Produced.Add(uint64(len(msgs)))
		return nil, nil
	}
	p.KafkaErrors.Add(1)
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) || len(werrs) != len(msgs) {
		return msgs, err
	}
	var retry []kafka.Message
	for i, e := range werrs {
		switch {
		case e == nil:
			p.Produced.Add(1)
		case permanent(e):
			p.drop(string(msgs[i].Key), e)
		default:
			retry = append(retry, msgs[i])
		}
	}
	if len(retry) == 0 {
		return nil, nil
	}
	return retry, err
}

// permanent reports whether the broker refused a message for what it is,
// so that sending it again cannot succeed.
func permanent(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke {
	case kafka.MessageSizeTooLarge, kafka.InvalidMessage, kafka.InvalidRecord, kafka.RecordListTooLarge,
		kafka.InvalidMessageSize:
		return true
	}
	return false
}

func (p *KafkaProducer) drop(key string, err error) { setAside(&p.Dropped, p.dropLog, key, err) }

// DroppedDeltas implements [DropCounter].
func (p *KafkaProducer) DroppedDeltas() uint64 { return p.Dropped.Load() }

func (p *KafkaProducer) toSpill(msgs []kafka.Message) error {
	payloads := make([][]byte, len(msgs))
	for i := range msgs {
		payloads[i] = msgs[i].Value
	}
	if err := p.spill.Append(payloads); err != nil {
		p.Failed.Add(1)
		return err
	}
	p.Spilled.Add(uint64(len(msgs)))
	return nil
}

// replay sends spilled records in order (requires p.mu held). A record
// that cannot be decoded or that the broker refuses for good is dropped
// (counted, logged): it must not hold the records behind it.
func (p *KafkaProducer) replay(ctx context.Context) error {
	if p.spill == nil || p.spill.Records() == 0 {
		return nil
	}
	return p.spill.Replay(1000, func(payloads [][]byte) error {
		msgs := make([]kafka.Message, 0, len(payloads))
		for _, v := range payloads {
			d, err := Decode(v)
			if err != nil {
				p.drop("", fmt.Errorf("undecodable spill record: %w", err))
				continue
			}
			msgs = append(msgs, kafka.Message{Key: []byte(d.CounterKey), Value: v,
				Headers: []kafka.Header{{Key: SchemaHeader, Value: []byte(SchemaV1)}}})
		}
		if len(msgs) == 0 {
			return nil
		}
		if _, err := p.write(ctx, msgs); err != nil {
			return err // resend the whole batch later: copies are dropped downstream
		}
		return nil
	})
}

// SpillRecords returns how many deltas wait in the spill file.
func (p *KafkaProducer) SpillRecords() int64 {
	if p.spill == nil {
		return 0
	}
	return p.spill.Records()
}

// SpillBytes is the size of the spill file's unreplayed part (0 without
// one).
func (p *KafkaProducer) SpillBytes() int64 {
	if p.spill == nil {
		return 0
	}
	return p.spill.Bytes()
}

// Close stops the replay loop, makes one last attempt to replay the spill
// within ctx, and closes the writer. Whatever is still spilled stays on
// disk for the next start.
func (p *KafkaProducer) Close(ctx context.Context) error {
	if p.stop != nil {
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.replay(ctx); err != nil {
		p.cfg.Logger.Warn("deltas left in the spill file for the next start", "records", p.spill.Records(), "error", err)
	}
	err := p.w.Close()
	if p.spill != nil {
		if cerr := p.spill.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
