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

// KafkaProducer sends deltas to a Kafka topic as v2 records: the deltas of
// one Produce call that reach one partition (by counter key, murmur2 as the
// Java client: one key always reaches one partition, so one aggregator)
// packed into one record of at most MaxPackBytes, keyed by its first
// delta's counter key; compressed, acknowledged by all in-sync replicas.
// Calls are serialised, so per-partition order is the order of Produce
// calls. A record the broker refuses as too large is split in two and sent
// again, down to one delta a record, and later records are packed no
// larger than what it took.
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

	parts   atomic.Int64 // the topic's partitions, as the writer last saw them (0: not yet)
	packMax atomic.Int64 // bytes a record may hold (lowered when the broker refuses one as too large)

	// Counters for metrics. Produced and Records count what Kafka
	// acknowledged, copies included: a write that failed in part is sent
	// again whole, and the aggregator drops the copies.
	Produced atomic.Uint64 // deltas acknowledged by Kafka (directly or by replay)
	Records  atomic.Uint64 // records acknowledged by Kafka (Produced / Records: deltas a record)
	Spilled  atomic.Uint64 // deltas written to the spill file
	Failed   atomic.Uint64 // Produce calls that returned an error
	// KafkaErrors counts writes Kafka refused in part or whole: their
	// records were split and sent again, went to the spill file, or
	// Failed counts them.
	KafkaErrors atomic.Uint64
	// Dropped counts deltas set aside for good: invalid, larger than
	// MaxRecordBytes, or alone in a record the broker refused for what it
	// is (too large, invalid; a record of several is split first, so that
	// only the culprit goes). Retrying them could only block the deltas
	// behind them; each is logged (at most one line per 10 s).
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
	// thirds of the checker's allocations. A flush makes about one record
	// per partition (a few more for a flush above MaxPackBytes).
	p.w = newWriter(cfg.Brokers, cfg.Topic, comp, cfg.BatchTimeout, cfg.WriteTimeout, 256, 4<<20, p.cfg.Security.transport())
	p.w.Balancer = learningBalancer{n: &p.parts}
	p.packMax.Store(MaxPackBytes)
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
	n, err := ensureTopic(ctx, p.cfg.Security, p.cfg.Brokers, p.cfg.Topic, p.cfg.Partitions, p.cfg.ReplicationFactor)
	if err != nil {
		return err
	}
	if n > 0 {
		p.parts.CompareAndSwap(0, int64(n))
	}
	p.topicReady.Store(true)
	return nil
}

// EnsureTopic creates topic with the given partitions and replication on
// the cluster at brokers, unless it exists.
func EnsureTopic(ctx context.Context, sec Security, brokers []string, topic string, partitions, replication int) error {
	_, err := ensureTopic(ctx, sec, brokers, topic, partitions, replication)
	return err
}

// ensureTopic is EnsureTopic, answering the partitions the topic has
// (0: not known yet).
func ensureTopic(ctx context.Context, sec Security, brokers []string, topic string, partitions, replication int) (int, error) {
	d := sec.dialer(3 * time.Second)
	var conn *kafka.Conn
	var err error
	for _, b := range brokers {
		if conn, err = d.DialContext(ctx, "tcp", b); err == nil {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("no broker answers: %w", err)
	}
	defer conn.Close()
	controller, err := conn.Controller()
	if err != nil {
		return 0, fmt.Errorf("find the controller: %w", err)
	}
	cc, err := d.DialContext(ctx, "tcp", net.JoinHostPort(controller.Host, strconv.Itoa(controller.Port)))
	if err != nil {
		return 0, fmt.Errorf("dial the controller: %w", err)
	}
	defer cc.Close()
	err = cc.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: replication})
	if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return 0, fmt.Errorf("create topic %s: %w", topic, err)
	}
	// A topic just created has no partition leaders for a moment; a
	// consumer group joined then gets no partitions at all, and a writer
	// caches the topic as missing. Wait (up to 5 s) until every partition
	// has a leader.
	give := time.Now().Add(5 * time.Second)
	n := 0
	for wait := 20 * time.Millisecond; time.Now().Before(give); wait = min(2*wait, 500*time.Millisecond) {
		ps, err := conn.ReadPartitions(topic)
		ready := err == nil && len(ps) > 0
		for _, p := range ps {
			ready = ready && p.Leader.Host != ""
		}
		if err == nil {
			n = len(ps)
		}
		if ready {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("events: topic %s has no partition leaders yet: %w", topic, ctx.Err())
		case <-time.After(wait):
		}
	}
	return n, nil // kafka-go retries from here
}

// learningBalancer is murmur2 partitioning (as the Java client) that
// keeps the partition count the writer balances over, which packing
// groups deltas by.
type learningBalancer struct{ n *atomic.Int64 }

func (b learningBalancer) Balance(msg kafka.Message, partitions ...int) int {
	b.n.Store(int64(len(partitions)))
	return kafka.Murmur2Balancer{Consistent: true}.Balance(msg, partitions...)
}

// packing returns the packer of this moment: by murmur2 over the
// topic's partitions once they are known; until then (Kafka unreachable
// since the start) one delta a record, which the writer places by its own
// key whatever the count turns out to be — a record packed by a guessed
// count would carry deltas to partitions their keys do not reach.
func (p *KafkaProducer) packing() packer {
	pk := packer{max: int(p.packMax.Load()), dropped: &p.Dropped, dropLog: p.dropLog, perRecord: MaxPackDeltas}
	n := int(p.parts.Load())
	if n <= 0 {
		pk.perRecord = 1
		n = p.cfg.Partitions // only to number the records' partitions for writeRounds
	}
	pk.partOf = func(key string) int { return murmur2Partition([]byte(key), n) }
	return pk
}

// murmur2Partition is kafka-go's Murmur2Balancer over partitions 0…n-1,
// which is what the writer is given.
func murmur2Partition(key []byte, n int) int {
	if l := partitionList.Load(); l != nil && len(*l) >= n {
		return kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: key}, (*l)[:n]...)
	}
	l := make([]int, n)
	for i := range l {
		l[i] = i
	}
	partitionList.Store(&l)
	return kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: key}, l...)
}

// partitionList holds 0…n-1 for the largest n asked so far.
var partitionList atomic.Pointer[[]int]

// Produce implements [Producer]. A delta that can never be delivered
// (invalid, or above MaxRecordBytes) is counted in Dropped and logged,
// never returned as an error: the caller would retry it forever and hold
// up everything behind it.
func (p *KafkaProducer) Produce(ctx context.Context, deltas []*eventsv1.Delta) error {
	msgs := messages(p.packing().pack(deltas))
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
	failed, err := p.writeRounds(ctx, msgs)
	if err == nil {
		return nil
	}
	if p.spill == nil {
		p.Failed.Add(1)
		return fmt.Errorf("events: produce %d deltas: %w", deltasOf(failed), err)
	}
	p.cfg.Logger.Warn("kafka write failed; spilling deltas to disk", "deltas", deltasOf(failed), "error", err)
	return p.toSpill(failed)
}

// message is r as a Kafka message (its delta count rides along as the
// writer's data, for the counters).
func message(r record) kafka.Message {
	return kafka.Message{Key: r.key, Value: r.value, WriterData: r,
		Headers: []kafka.Header{{Key: SchemaHeader, Value: []byte(SchemaV2)}}}
}

// messages is recs as Kafka messages, in order.
func messages(recs []record) []kafka.Message {
	msgs := make([]kafka.Message, len(recs))
	for i, r := range recs {
		msgs[i] = message(r)
	}
	return msgs
}

func deltasOf(msgs []kafka.Message) (n int) {
	for _, m := range msgs {
		n += m.WriterData.(record).deltas
	}
	return n
}

// writeRounds sends msgs in rounds, in order, each holding at most
// packMax bytes of any one partition (the broker bounds the batch a write
// makes for a partition, max.message.bytes, and a record alone is packed
// to fit it). It returns what is to be tried again: what write returned
// of the round that failed, and every later round.
func (p *KafkaProducer) writeRounds(ctx context.Context, msgs []kafka.Message) ([]kafka.Message, error) {
	var rounds [][]kafka.Message
	limit := int(p.packMax.Load())
	type fill struct{ round, bytes int }
	at := map[int]fill{} // partition → its last round and the bytes it has there
	for _, m := range msgs {
		part := m.WriterData.(record).part
		f, ok := at[part]
		if !ok {
			f = fill{}
		} else if f.bytes+len(m.Value) > limit {
			f = fill{round: f.round + 1}
		}
		f.bytes += len(m.Value)
		at[part] = f
		for f.round >= len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[f.round] = append(rounds[f.round], m)
	}
	for k, round := range rounds {
		failed, err := p.write(ctx, round)
		if err != nil {
			for _, later := range rounds[k+1:] {
				failed = append(failed, later...)
			}
			return failed, err
		}
	}
	return nil, nil
}

// write sends msgs and returns those to try again. Messages the broker
// refused for good are dropped (counted, logged); they never come back,
// except a record of several deltas refused as too large, which is sent
// again at once in smaller records (writeSplit). A partition's messages
// keep their order: once one of them is to be tried again, so are the
// ones behind it.
func (p *KafkaProducer) write(ctx context.Context, msgs []kafka.Message) ([]kafka.Message, error) {
	err := p.w.WriteMessages(ctx, msgs...)
	if err == nil {
		p.acked(msgs...)
		return nil, nil
	}
	p.KafkaErrors.Add(1)
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) || len(werrs) != len(msgs) {
		return msgs, err
	}
	var retry []kafka.Message
	held := map[int]bool{} // partitions with a message to try again
	for i, e := range werrs {
		r := msgs[i].WriterData.(record)
		switch {
		case e == nil:
			p.acked(msgs[i])
		case held[r.part]:
			retry = append(retry, msgs[i])
		case (tooLarge(e) || permanent(e)) && r.deltas > 1:
			if rest, serr := p.writeSplit(ctx, r, tooLarge(e)); serr != nil {
				retry, held[r.part], err = append(retry, rest...), true, serr
			}
		case permanent(e):
			p.drop(string(msgs[i].Key), r.deltas, e)
		default:
			retry, held[r.part] = append(retry, msgs[i]), true
		}
	}
	if len(retry) == 0 {
		return nil, nil
	}
	return retry, err
}

// writeSplit sends a record the broker refused for good in halves, one
// write each (the broker bounds the batch a write makes for a partition,
// not one record), halving again what is still refused, down to the
// deltas refused alone, which are dropped. Refused as too large, later
// records are packed no larger than half of it. It returns the part not
// sent when a write fails for a passing reason.
func (p *KafkaProducer) writeSplit(ctx context.Context, r record, large bool) ([]kafka.Message, error) {
	if large {
		p.packMax.Store(min(p.packMax.Load(), int64(len(r.value)/2)))
	}
	a, z := r.split()
	queue := []record{a, z}
	for len(queue) > 0 {
		h := queue[0]
		if h.deltas > 1 && int64(len(h.value)) > p.packMax.Load() {
			a, z := h.split()
			queue = append([]record{a, z}, queue[1:]...)
			continue
		}
		err := p.w.WriteMessages(ctx, message(h))
		if err == nil {
			p.acked(message(h))
			queue = queue[1:]
			continue
		}
		p.KafkaErrors.Add(1)
		if werrs, ok := err.(kafka.WriteErrors); ok && len(werrs) == 1 && werrs[0] != nil {
			err = werrs[0] // the one message's own error
		}
		switch {
		case tooLarge(err) && h.deltas > 1:
			p.packMax.Store(min(p.packMax.Load(), int64(len(h.value)/2)))
			continue // split at the top of the loop
		case permanent(err) && h.deltas > 1:
			a, z := h.split()
			queue = append([]record{a, z}, queue[1:]...)
			continue
		case permanent(err):
			p.drop(string(h.key), h.deltas, err)
			queue = queue[1:]
			continue
		}
		rest := make([]kafka.Message, len(queue))
		for i, q := range queue {
			rest[i] = message(q)
		}
		return rest, err
	}
	return nil, nil
}

func (p *KafkaProducer) acked(msgs ...kafka.Message) {
	p.Records.Add(uint64(len(msgs)))
	p.Produced.Add(uint64(deltasOf(msgs)))
}

// tooLarge reports whether the broker or the writer refused a record for
// its size alone.
func tooLarge(err error) bool {
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke == kafka.MessageSizeTooLarge || ke == kafka.RecordListTooLarge
	}
	var me kafka.MessageTooLargeError
	return errors.As(err, &me)
}

// permanent reports whether the broker refused a message for what it is,
// so that sending it again cannot succeed.
func permanent(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke {
	case kafka.MessageSizeTooLarge, kafka.InvalidRecord, kafka.RecordListTooLarge, kafka.InvalidMessageSize:
		// (not InvalidMessage: a checksum failure on the way, which a
		// retry fixes)
		return true
	}
	return false
}

func (p *KafkaProducer) drop(key string, k int, err error) {
	setAside(&p.Dropped, p.dropLog, key, k, err)
}

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
	p.Spilled.Add(uint64(deltasOf(msgs)))
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
		// A spill file holds v2 records, or v1 records of the version
		// before; their deltas are packed again by the partitions the
		// topic has now, in their order. (Invalid deltas in a readable
		// record are dropped here, counted.)
		var deltas []*eventsv1.Delta
		for _, v := range payloads {
			ds, bad, badErr, err := DecodeRecord(v)
			if err != nil {
				p.drop("", 1, fmt.Errorf("undecodable spill record: %w", err))
				continue
			}
			if bad > 0 {
				p.drop(ds0Key(ds), bad, fmt.Errorf("invalid deltas in a spill record: %w", badErr))
			}
			deltas = append(deltas, ds...)
		}
		msgs := messages(p.packing().pack(deltas))
		if len(msgs) == 0 {
			return nil
		}
		if _, err := p.writeRounds(ctx, msgs); err != nil {
			return err // resend the whole batch later: copies are dropped downstream
		}
		return nil
	})
}

// ds0Key is the first delta's counter key, for a log line ("" for none).
func ds0Key(ds []*eventsv1.Delta) string {
	if len(ds) == 0 {
		return ""
	}
	return ds[0].CounterKey
}

// SpillRecords returns how many records (of one or more deltas) wait in
// the spill file.
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
