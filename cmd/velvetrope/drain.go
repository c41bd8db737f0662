package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"go.uber.org/fx"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/deferred"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/limiter"
)

// runDrain implements `velvetrope drain`: the deferred topic's consumer
// group, releasing each key's items when it has budget and delivering
// them to their rule's target.
func runDrain(args []string, stdout, stderr io.Writer) int {
	return runProcess("drain", args, stdout, stderr, drainModule, func(w io.Writer, addr, _ string) {
		fmt.Fprintf(w, "velvetrope drain: serving metrics on http://%s/metrics\n", addr)
	})
}

// deadLetterTopic is where a deferred topic's items go when they fail for
// good.
func deadLetterTopic(app config.App) string { return app.Kafka.DeferredTopic + ".dlq" }

// newDeferredWriter is the deferred topic's writer (the checker appends
// items; a drain writes nothing there).
func newDeferredWriter(sd *shutdown, app config.App) (*events.KafkaWriter, error) {
	return kafkaWriter(sd, app, app.Kafka.DeferredTopic)
}

// kafkaWriter closes with the producers (stopProducer): after the
// listeners and the drain that write through it.
func kafkaWriter(sd *shutdown, app config.App, topic string) (*events.KafkaWriter, error) {
	if err := requireKafka(app); err != nil {
		return nil, err
	}
	sec, err := kafkaSecurity(app)
	if err != nil {
		return nil, staged("kafka", err)
	}
	w, err := events.NewKafkaWriter(events.WriterConfig{Brokers: app.Kafka.Brokers, Topic: topic,
		Partitions: app.Checker.TopicPartitions, Security: sec})
	if err != nil {
		return nil, staged("kafka", err)
	}
	sd.stop(stopProducer, "kafka "+topic, w.Close)
	return w, nil
}

// newQueue is a checker's deferred queue: items to the deferred topic
// with the values of hash_values rules hashed by c; ticket states,
// request ids and the count of queued items (deferred.max_bytes) in the
// counter store.
func newQueue(pub events.Publisher, store counters.Deferrals, app config.App, c *checker.Checker) *deferred.Queue {
	return deferred.NewQueue(pub, store, nil, app.Deferred.StateRetention).WithHasher(c).WithMaxBytes(app.Deferred.MaxBytes)
}

// queueMetrics exposes a queue's enqueues.
func queueMetrics(reg *metrics.Registry, q *deferred.Queue) {
	reg.Counter("velvetrope_deferred_enqueued_total", "Deferred requests appended to the deferred topic.", func() float64 { return float64(q.Enqueued.Load()) })
	reg.Counter("velvetrope_deferred_enqueue_errors_total", "Deferred requests the topic or the ticket store refused (answered deny, with defer_error).",
		func() float64 { return float64(q.EnqueueErrors.Load()) })
	reg.Counter("velvetrope_deferred_payloads_refused_total", "Deferred requests whose payload was refused (too large or malformed).",
		func() float64 { return float64(q.Refused.Load()) })
	reg.Labeled("velvetrope_deferred_refused_total", "Requests that would have been deferred, refused at a bound of the queue "+
		"(answered deny, with defer_error): the rule's defer.max_queued for the key, or deferred.max_bytes in all.", "counter", "reason",
		func() map[string]float64 {
			return map[string]float64{deferred.BoundMaxQueued: float64(q.FullKey.Load()), deferred.BoundMaxBytes: float64(q.FullBytes.Load())}
		})
	reg.Counter("velvetrope_deferred_repeats_total", "Deferred requests whose request_id was deferred before: answered that ticket, not queued again.",
		func() float64 { return float64(q.Repeats.Load()) })
}

// drainMetrics exposes a drain's work.
func drainMetrics(reg *metrics.Registry, d *deferred.Drain) {
	reg.Gauge("velvetrope_drain_queue_depth", "Deferred items this drain holds: waiting for budget or being delivered.",
		func() float64 { n, _, _ := d.Depth(); return float64(n) })
	reg.Labeled("velvetrope_drain_queue_age_seconds", "Age of the items held (since enqueued), by quantile.", "gauge", "quantile",
		func() map[string]float64 {
			_, p50, p99 := d.Depth()
			return map[string]float64{"0.5": p50.Seconds(), "0.99": p99.Seconds()}
		})
	reg.Counter("velvetrope_drain_records_total", "Records read from the deferred topic.", func() float64 { return float64(d.Fetched.Load()) })
	reg.Counter("velvetrope_drain_releases_total", "Items the counters admitted again (each charged once).", func() float64 { return float64(d.Releases.Load()) })
	reg.Counter("velvetrope_drain_release_waits_total", "Release decisions that said not yet.", func() float64 { return float64(d.Waits.Load()) })
	reg.Counter("velvetrope_drain_deliveries_total", "Items the target accepted (2xx).", func() float64 { return float64(d.Deliveries.Load()) })
	reg.Counter("velvetrope_drain_retries_total", "Delivery attempts that failed and were tried again.", func() float64 { return float64(d.Retries.Load()) })
	reg.Counter("velvetrope_drain_duplicates_total", "Records of tickets already finished (re-read after a crash or rebalance), not delivered again.",
		func() float64 { return float64(d.Duplicates.Load()) })
	reg.Counter("velvetrope_drain_store_errors_total", "Release decisions or ticket writes the counter store failed.", func() float64 { return float64(d.StoreErrors.Load()) })
	reg.Counter("velvetrope_drain_commit_errors_total", "Offset commits that failed (retried).", func() float64 { return float64(d.CommitErrs.Load()) })
	reg.Labeled("velvetrope_drain_dead_letters_total", "Items set aside on the dead-letter topic, by reason.", "counter", "reason",
		func() map[string]float64 {
			out := map[string]float64{}
			for k, v := range d.DeadLetters() {
				out[k] = float64(v)
			}
			return out
		})
}

// drainConfig maps the application config onto a drain's.
func drainConfig(app config.App, logger *slog.Logger) deferred.DrainConfig {
	df := app.Deferred
	return deferred.DrainConfig{Workers: df.Workers, MaxInFlight: df.MaxInFlight, DeliveryTimeout: df.DeliveryTimeout,
		BackoffMin: df.BackoffMin, BackoffMax: df.BackoffMax, Retention: df.StateRetention, Logger: logger}
}

// startDrain runs d for the process's life.
// It stops with the listeners (stopListeners): it is an intake of the
// process, deciding through its checker, which stops after it.
func startDrain(sd *shutdown, d *deferred.Drain, logger *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	sd.hook(stopListeners, "drain", func(context.Context) error {
		go func() {
			defer close(done)
			if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				logger.Error("drain stopped", "error", err)
			}
		}()
		return nil
	}, func(sctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-sctx.Done():
			return sctx.Err()
		}
	})
}

// drainModule wires `velvetrope drain`: its own checker (its releases are
// decisions on the shared counters, emitted like any checker's), the
// deferred topic's consumer group and the dead-letter writer.
func drainModule(app config.App, logger *slog.Logger) fx.Option {
	return fx.Options(
		fx.Supply(app, logger),
		fx.Provide(
			newShutdown,
			newRegistry,
			newRuleStore,
			newRedis,
			newCounters,
			newKafkaProducer,
			func(sd *shutdown, app config.App, logger *slog.Logger, rules *config.Store, store *counters.Redis,
				prod *events.KafkaProducer) (*checker.Checker, error) {
				cfg := checkerConfig(app, logger)
				cfg.InstanceName = app.InstanceID + "-drain"
				c, err := checker.New(cfg, rules, store, prod, limiter.SystemClock{})
				if err != nil {
					return nil, staged("checker", err)
				}
				sd.hook(stopWork, "checker", c.Start, c.Stop)
				return c, nil
			},
			func(sd *shutdown, app config.App, logger *slog.Logger, rules *config.Store, store *counters.Redis,
				c *checker.Checker) (*deferred.Drain, *events.KafkaConsumer, error) {
				sec, err := kafkaSecurity(app)
				if err != nil {
					return nil, nil, staged("kafka", err)
				}
				// the topic exists before the group joins it, so that the
				// first items are not missed while kafka-go waits for it
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = events.EnsureTopic(ctx, sec, app.Kafka.Brokers, app.Kafka.DeferredTopic, app.Checker.TopicPartitions, 1)
				cancel()
				if err != nil {
					return nil, nil, staged("kafka", fmt.Errorf("topic %s: %w", app.Kafka.DeferredTopic, err))
				}
				cons, err := events.NewKafkaConsumer(events.KafkaConsumerConfig{Brokers: app.Kafka.Brokers,
					Topic: app.Kafka.DeferredTopic, Group: app.Deferred.Group, Security: sec})
				if err != nil {
					return nil, nil, staged("kafka", err)
				}
				dlq, err := kafkaWriter(sd, app, deadLetterTopic(app))
				if err != nil {
					return nil, nil, err
				}
				cfg := drainConfig(app, logger)
				cfg.Consumer, cfg.DeadLetters, cfg.Checker, cfg.Rules, cfg.Tickets = cons, dlq, c, rules.Load, store
				d, err := deferred.NewDrain(cfg)
				if err != nil {
					return nil, nil, staged("drain", err)
				}
				// registered before the drain's run: it closes after it
				sd.stop(stopListeners, "kafka "+app.Kafka.DeferredTopic+" consumer", cons.Close)
				return d, cons, nil
			},
			func(sd *shutdown, app config.App, c *checker.Checker, d *deferred.Drain, cons *events.KafkaConsumer,
				prod *events.KafkaProducer, reg *metrics.Registry) (*httpapi.Server, error) {
				mux := http.NewServeMux()
				drainMetrics(reg, d)
				checkerMetrics(reg, c, prod)
				reg.Gauge("velvetrope_drain_consumer_lag", "Records the drain's consumer is behind the deferred topic's end.",
					func() float64 { return float64(cons.Lag()) })
				mux.Handle("GET /metrics", reg)
				httpapi.Health(mux, func() error {
					if err := c.StoreReady(); err != nil {
						return err
					}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					member, state, err := cons.Membership(ctx)
					switch {
					case err != nil:
						return err
					case !member:
						return fmt.Errorf("not (yet) a member of consumer group %s (group state %s)", app.Deferred.Group, state)
					}
					return nil
				})
				return newHTTPServer(sd, app, mux, 10*time.Second, reg)
			},
		),
		fx.Invoke(watchRules, startDrain),
	)
}

// devDeferred is dev's deferred topic and dead letters, in memory.
type devDeferred struct {
	topic *events.MemBus
	pub   devTopic // the topic as the queue appends to it
	dead  *deferred.MemDeadLetters
}

// devDeadLetterBytes bounds the dead letters dev keeps (the newest;
// nobody consumes them: the drain's metrics and log say what was set
// aside).
const devDeadLetterBytes = 16 << 20

func newDevDeferred(sd *shutdown, app config.App) (devDeferred, error) {
	topic, err := events.NewMemBus(16, 1<<20)
	if err != nil {
		return devDeferred{}, err
	}
	// The records not yet committed: the queued items (deferred.max_bytes
	// bounds those) and the finished ones behind a partition's oldest
	// unfinished item, which a commit cannot pass: twice the bound.
	topic.LimitBytes(2 * app.Deferred.MaxBytes)
	sd.stop(stopProducer, "deferred bus", topic.Close)
	return devDeferred{topic: topic, pub: devTopic{topic, 2 * app.Deferred.MaxBytes},
		dead: deferred.NewMemDeadLetters(devDeadLetterBytes)}, nil
}

// devTopic is dev's deferred topic as a publisher: a full bus says which
// bound it is.
type devTopic struct {
	*events.MemBus
	max int64
}

// Publish implements events.Publisher.
func (t devTopic) Publish(ctx context.Context, msgs []events.Message) error {
	err := t.MemBus.Publish(ctx, msgs)
	if errors.Is(err, events.ErrBusFull) {
		return fmt.Errorf("dev's in-memory deferred topic holds %d bytes of records not yet committed (2 × deferred.max_bytes): %w", t.max, err)
	}
	return err
}

// newDevDrain is dev's drain, over dev's own checker and buses.
func newDevDrain(app config.App, logger *slog.Logger, dd devDeferred, c *checker.Checker, rules *config.Store,
	store *counters.MemStore) (*deferred.Drain, error) {
	cfg := drainConfig(app, logger)
	cfg.Consumer, cfg.DeadLetters, cfg.Checker, cfg.Rules, cfg.Tickets = dd.topic, dd.dead, c, rules.Load, store
	d, err := deferred.NewDrain(cfg)
	return d, staged("drain", err)
}
