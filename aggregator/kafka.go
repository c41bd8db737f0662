package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// Config configures the Kafka aggregator. Zero values take the defaults
// shown; the consumer timeouts are short so that a dead aggregator's
// partitions move within seconds.
type Config struct {
	Brokers           []string
	Topic             string
	Group             string          // "velvetrope-aggregator"
	Partitions        int             // when creating the topic: 16
	Replication       int             // when creating the topic: 1
	BatchSize         int             // deltas applied per round: 1000 (whole records: a round may take more)
	BatchWait         time.Duration   // longest wait to fill a batch: 20 ms
	SessionTimeout    time.Duration   // 6 s
	HeartbeatInterval time.Duration   // 1 s
	RebalanceTimeout  time.Duration   // 6 s
	RetryBackoff      time.Duration   // first wait after a Redis error: 100 ms (doubling to 5 s)
	ReadyInterval     time.Duration   // how often readiness is re-checked: 1 s
	Security          events.Security // TLS and SASL towards the brokers (zero: plaintext)
	// Analytics, when set, receives every batch once Redis has applied it
	// (the ClickHouse sink's buffer: it must not block).
	Analytics Analytics
	Logger    *slog.Logger
}

// Analytics takes deltas for the usage analytics; Add must return at once
// (sink.Writer buffers). Copies are fine: the sink keeps one row version.
type Analytics interface {
	Add(deltas []*eventsv1.Delta)
}

func (c *Config) defaults() error {
	if len(c.Brokers) == 0 || c.Topic == "" {
		return errors.New("aggregator: brokers and a topic are required")
	}
	if c.Group == "" {
		c.Group = "velvetrope-aggregator"
	}
	if c.Partitions == 0 {
		c.Partitions = 16
	}
	if c.Replication == 0 {
		c.Replication = 1
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.BatchWait == 0 {
		c.BatchWait = 20 * time.Millisecond
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.ReadyInterval == 0 {
		c.ReadyInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Stats are the aggregator's counters, for metrics.
type Stats struct {
	Batches, Applied, Skipped, Bad atomic.Uint64
	Records                        atomic.Uint64 // records taken (a v2 record holds many deltas)
	LastBatch                      atomic.Int64  // deltas in the last batch
	RoundTrips, RedisErrors        atomic.Uint64
	// Scripts counts Redis script calls (one per counter and window of a
	// batch); AlreadyApplied the deltas that needed none.
	Scripts, AlreadyApplied atomic.Uint64
	ApplyNanos              atomic.Uint64 // total time spent applying
}

// Kafka consumes deltas with a kafka-go consumer group and applies them to
// the Redis counters, at most once each (counters.Redis.ApplyBatch), and
// commits offsets only after Redis has applied them. A Redis error is
// retried with backoff and nothing past it is committed; a malformed record
// is counted, logged and skipped.
type Kafka struct {
	cfg    Config
	store  *counters.Redis
	cons   *events.KafkaConsumer
	reader *events.Reader
	cancel context.CancelFunc
	done   chan struct{}
	ready  atomic.Pointer[string] // why not ready; "" when ready

	// afterApply runs between the Redis apply and the offset commit; tests
	// use it to kill the aggregator exactly there.
	afterApply func()
	readyDone  chan struct{}

	Stats Stats
	// Accuracy is the realised accuracy of the limits the deltas report.
	Accuracy *Accuracy
}

// NewKafka returns an aggregator of cfg's topic into store.
func NewKafka(cfg Config, store *counters.Redis) (*Kafka, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("aggregator: a counter store is required")
	}
	return &Kafka{cfg: cfg, store: store, Accuracy: NewAccuracy(100_000)}, nil
}

// Start creates the topic if it is missing (the aggregator may start
// before any checker), joins the consumer group and starts the loop.
func (a *Kafka) Start(ctx context.Context) error {
	if err := events.EnsureTopic(ctx, a.cfg.Security, a.cfg.Brokers, a.cfg.Topic, a.cfg.Partitions, a.cfg.Replication); err != nil {
		return fmt.Errorf("topic %s: %w", a.cfg.Topic, err)
	}
	cons, err := events.NewKafkaConsumer(events.KafkaConsumerConfig{Brokers: a.cfg.Brokers, Topic: a.cfg.Topic,
		Group: a.cfg.Group, SessionTimeout: a.cfg.SessionTimeout, HeartbeatInterval: a.cfg.HeartbeatInterval,
		RebalanceTimeout: a.cfg.RebalanceTimeout, Security: a.cfg.Security})
	if err != nil {
		return err
	}
	a.cons, a.reader = cons, events.NewReader(cons, a.cfg.Logger)
	why := "aggregator: not yet a member of group " + a.cfg.Group
	a.ready.Store(&why)
	loopCtx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	a.readyDone = make(chan struct{})
	go a.loop(loopCtx)
	go a.readyLoop(loopCtx)
	return nil
}

// Ready reports whether the aggregator can do its work: it is a member of
// its consumer group (with partitions or, when the group has more members
// than the topic has partitions, none) and Redis answers. Checked every
// ReadyInterval in the background, so a probe never waits on either.
func (a *Kafka) Ready() error {
	if why := a.ready.Load(); why != nil && *why != "" {
		return errors.New(*why)
	}
	return nil
}

func (a *Kafka) readyLoop(ctx context.Context) {
	defer close(a.readyDone)
	t := time.NewTicker(a.cfg.ReadyInterval)
	defer t.Stop()
	for {
		a.checkReady(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkReady asks the group coordinator and Redis, each within
// ReadyInterval, and records the first reason not to be ready.
func (a *Kafka) checkReady(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, a.cfg.ReadyInterval)
	defer cancel()
	why := ""
	member, state, err := a.cons.Membership(cctx)
	switch {
	case err != nil:
		why = "aggregator: group coordinator not reachable: " + err.Error()
	case !member:
		why = fmt.Sprintf("aggregator: not a member of group %s (group state %q)", a.cfg.Group, state)
	default:
		if err := a.store.Ping(cctx); err != nil {
			why = "aggregator: redis not reachable: " + err.Error()
		}
	}
	if ctx.Err() != nil {
		return
	}
	a.ready.Store(&why)
}

func (a *Kafka) loop(ctx context.Context) {
	defer close(a.done)
	for ctx.Err() == nil {
		msgs, batch := a.fetch(ctx)
		if len(msgs) == 0 {
			continue
		}
		a.Stats.LastBatch.Store(int64(len(batch)))
		a.Stats.Records.Add(uint64(len(msgs)))
		a.applyWithRetry(ctx, batch)
		now := time.Now().UnixNano()
		for _, x := range batch {
			a.Accuracy.Observe(x.Delta, now)
		}
		if a.cfg.Analytics != nil {
			ds := make([]*eventsv1.Delta, len(batch))
			for i, x := range batch {
				ds[i] = x.Delta
			}
			a.cfg.Analytics.Add(ds)
		}
		if a.afterApply != nil {
			a.afterApply()
		}
		// Commit even when shutting down: the batch is applied.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := a.reader.Commit(cctx, msgs...); err != nil {
			a.cfg.Logger.Warn("offset commit failed; the batch will be fetched again and its deltas skipped",
				"error", err)
		}
		cancel()
		a.Stats.Batches.Add(1)
	}
}

// fetch collects whole records until BatchSize deltas or more are in
// hand, waiting at most BatchWait once the first one arrived (a record is
// applied whole, so that its offset is committed once all its deltas are).
func (a *Kafka) fetch(ctx context.Context) ([]events.Message, []counters.Delivered) {
	var msgs []events.Message
	var batch []counters.Delivered
	add := func(m events.Message, ds []*eventsv1.Delta) {
		msgs = append(msgs, m)
		for _, d := range ds {
			batch = append(batch, counters.Delivered{Partition: m.Partition, Delta: d})
		}
	}
	m, ds, err := a.reader.Next(ctx)
	if err != nil {
		return nil, nil
	}
	add(m, ds)
	wctx, cancel := context.WithTimeout(ctx, a.cfg.BatchWait)
	defer cancel()
	for len(batch) < a.cfg.BatchSize {
		m, ds, err := a.reader.Next(wctx)
		if err != nil {
			break
		}
		add(m, ds)
	}
	a.Stats.Bad.Store(a.reader.Bad())
	return msgs, batch
}

// applyWithRetry applies batch, retrying Redis errors with backoff until
// it succeeds: the batch's offsets are not committed before that. A stop
// request during the retries still finishes the batch once Redis answers.
func (a *Kafka) applyWithRetry(ctx context.Context, batch []counters.Delivered) {
	backoff := a.cfg.RetryBackoff
	for {
		start := time.Now()
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := a.store.ApplyBatch(actx, batch)
		cancel()
		a.Stats.RoundTrips.Add(uint64(res.RoundTrips))
		a.Stats.Scripts.Add(uint64(res.Scripts))
		if err == nil {
			a.Stats.AlreadyApplied.Add(uint64(res.AlreadyApplied))
			a.Stats.Applied.Add(uint64(res.Applied))
			a.Stats.Skipped.Add(uint64(res.Skipped))
			a.Stats.ApplyNanos.Add(uint64(time.Since(start)))
			return
		}
		a.Stats.RedisErrors.Add(1)
		a.cfg.Logger.Warn("applying deltas to Redis failed; retrying", "deltas", len(batch), "error", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			// keep trying with a short pause: never drop an unapplied batch
			time.Sleep(backoff)
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Lag returns how many messages the consumer is behind.
func (a *Kafka) Lag() int64 {
	if a.cons == nil {
		return 0
	}
	return a.cons.Lag()
}

// Stop ends the loop after the batch in hand is applied and committed,
// then leaves the group, within ctx.
func (a *Kafka) Stop(ctx context.Context) error {
	if a.cancel == nil {
		return nil
	}
	a.cancel()
	for _, done := range []chan struct{}{a.done, a.readyDone} {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return a.cons.Close(ctx)
}
