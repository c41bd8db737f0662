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

// drainIn is what a drain (dev's or the drain process's) is built from
// beside its topic, dead letters and tickets: the process's checker
// decides its releases under the live rules.
type drainIn struct {
	fx.In
	App     config.App
	Logger  *slog.Logger
	Checker *checker.Checker
	Rules   *config.Store
}

// newDrain maps the application config onto a drain reading topic,
// setting items aside on dead and keeping their tickets in tickets.
func (in drainIn) newDrain(topic events.Consumer, dead events.Publisher, tickets counters.Deferrals) (*deferred.Drain, error) {
	df := in.App.Deferred
	d, err := deferred.NewDrain(deferred.DrainConfig{Consumer: topic, DeadLetters: dead, Checker: in.Checker,
		Rules: in.Rules.Load, Tickets: tickets, Workers: df.Workers, MaxInFlight: df.MaxInFlight, DeliveryTimeout: df.DeliveryTimeout,
		BackoffMin: df.BackoffMin, BackoffMax: df.BackoffMax, Retention: df.StateRetention, Logger: in.Logger})
	return d, staged("drain", err)
}

// startDrain runs d for the process's life (dev's and the drain
// process's), its metrics on reg.
// It stops with the listeners (stopListeners): it is an intake of the
// process, deciding through its checker, which stops after it.
func startDrain(sd *shutdown, d *deferred.Drain, logger *slog.Logger, reg *metrics.Registry) {
	d.RegisterMetrics(reg)
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
		fx.Provide(newShutdown, newRegistry, newRuleStore, newRulesDB, newXDS),
		sharedBackends,
		provideChecker("-drain"),
		fx.Provide(
			func(sd *shutdown, store *counters.Redis, in drainIn) (*deferred.Drain, *events.KafkaConsumer, error) {
				app := in.App
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
				d, err := in.newDrain(cons, dlq, store)
				if err != nil {
					return nil, nil, err
				}
				// registered before the drain's run: it closes after it
				sd.stop(stopListeners, "kafka "+app.Kafka.DeferredTopic+" consumer", cons.Close)
				return d, cons, nil
			},
			func(sd *shutdown, app config.App, c *checker.Checker, cons *events.KafkaConsumer,
				reg *metrics.Registry) (*httpapi.Server, error) {
				mux := http.NewServeMux()
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
		fx.Invoke(watchRules, startDrain, func(*rulesDB, *xdsRules) {}),
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

// newDevDeferred is dev's deferred topic, closed with the producers, and
// its dead letters.
func newDevDeferred(sd *shutdown, app config.App, reg *metrics.Registry) (devDeferred, error) {
	topic, err := events.NewMemBus(16, 1<<20)
	if err != nil {
		return devDeferred{}, err
	}
	// The records not yet committed: the queued items (deferred.max_bytes
	// bounds those) and the finished ones behind a partition's oldest
	// unfinished item, which a commit cannot pass: twice the bound.
	topic.LimitBytes(2 * app.Deferred.MaxBytes)
	sd.stop(stopProducer, "deferred bus", topic.Close)
	dead := deferred.NewMemDeadLetters(devDeadLetterBytes)
	dead.RegisterMetrics(reg)
	return devDeferred{topic: topic, pub: devTopic{topic, 2 * app.Deferred.MaxBytes}, dead: dead}, nil
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
func newDevDrain(dd devDeferred, store *counters.MemStore, in drainIn) (*deferred.Drain, error) {
	return in.newDrain(dd.topic, dd.dead, store)
}
