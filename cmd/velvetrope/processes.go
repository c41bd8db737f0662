package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/velvetrope/velvetrope/aggregator"
	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/analytics"
	"github.com/velvetrope/velvetrope/internal/decisions"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/tlsconf"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/rls"
	"github.com/velvetrope/velvetrope/sink"
)

// runChecker implements `velvetrope checker`: the check API over the
// async checker, sharing counters through Redis and Kafka.
func runChecker(args []string, stdout, stderr io.Writer) int {
	adminOff := false
	module := func(app config.App, logger *slog.Logger) fx.Option {
		adminOff = app.Admin.Token == ""
		return checkerModule(app, logger)
	}
	return runProcess("checker", args, stdout, stderr, module, func(w io.Writer, addr, grpcAddr string) {
		fmt.Fprintf(w, "velvetrope checker: listening on http://%s", addr)
		if grpcAddr != "" {
			fmt.Fprintf(w, " and grpc %s (Envoy rate limit service)", grpcAddr)
		}
		fmt.Fprintln(w)
		if adminOff {
			fmt.Fprintln(w, "velvetrope checker: no admin.token (VELVETROPE_ADMIN_TOKEN): the admin endpoints but GET /v1/rules answer 403")
		}
	})
}

// runAggregator implements `velvetrope aggregator`: deltas from Kafka into
// the Redis counters; /metrics, /healthz and /readyz on its HTTP listener.
func runAggregator(args []string, stdout, stderr io.Writer) int {
	return runProcess("aggregator", args, stdout, stderr, aggregatorModule, func(w io.Writer, addr, _ string) {
		fmt.Fprintf(w, "velvetrope aggregator: serving metrics on http://%s/metrics\n", addr)
	})
}

// newRedis connects to the configured Redis (one address: standalone; several:
// a cluster; with master_name: Sentinel) and checks that it answers. The
// timeouts are the request path's (redis.*_timeout).
func newRedis(sd *shutdown, app config.App) (redis.UniversalClient, error) {
	return dialRedis(sd, app, app.Redis.ReadTimeout, app.Redis.WriteTimeout, 0)
}

// newAggregatorRedis is the aggregator's client: a batch apply is one long
// script, so its reads and writes wait aggregator.redis_timeout, and
// go-redis retries them (the apply is idempotent).
func newAggregatorRedis(sd *shutdown, app config.App) (redis.UniversalClient, error) {
	return dialRedis(sd, app, app.Aggregator.RedisTimeout, app.Aggregator.RedisTimeout, 3)
}

// dialRedis builds the client. maxRetries 0 on the request path: a retry
// would double the wait of a decision the breaker and the failure policy
// answer better.
func dialRedis(sd *shutdown, app config.App, read, write time.Duration, maxRetries int) (redis.UniversalClient, error) {
	if len(app.Redis.Addrs) == 0 {
		return nil, staged("redis", errors.New("no address: set VELVETROPE_REDIS_ADDRS or redis.addrs"))
	}
	tlsCfg, err := tlsconf.Client(app.Redis.TLS, "redis.tls")
	if err != nil {
		return nil, staged("redis", err)
	}
	if maxRetries == 0 {
		maxRetries = -1 // go-redis: 0 means its default (3), -1 none
	}
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: app.Redis.Addrs, Username: app.Redis.Username,
		Password: app.Redis.Password, DB: app.Redis.DB, MasterName: app.Redis.MasterName,
		ClientName: "velvetrope-" + app.InstanceID, TLSConfig: tlsCfg,
		DialTimeout: app.Redis.DialTimeout, ReadTimeout: read, WriteTimeout: write, PoolTimeout: app.Redis.PoolTimeout,
		MaxRetries: maxRetries})
	sd.hook(stopClients, "redis", func(ctx context.Context) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(app.Redis.Addrs, ","), err)
		}
		return nil
	}, func(context.Context) error { return c.Close() })
	return c, nil
}

func newCounters(c redis.UniversalClient) *counters.Redis { return counters.NewRedis(c, "vr", 0) }

// kafkaSecurity builds TLS and SASL towards the brokers from kafka.tls
// and kafka.sasl.
func kafkaSecurity(app config.App) (events.Security, error) {
	tlsCfg, err := tlsconf.Client(app.Kafka.TLS, "kafka.tls")
	if err != nil {
		return events.Security{}, err
	}
	s := app.Kafka.SASL
	mech, err := events.SASLMechanism(s.Mechanism, s.Username, s.Password)
	if err != nil {
		return events.Security{}, fmt.Errorf("kafka.sasl: %w", err)
	}
	return events.Security{TLS: tlsCfg, SASL: mech}, nil
}

func requireKafka(app config.App) error {
	if len(app.Kafka.Brokers) == 0 {
		return staged("kafka", errors.New("no broker: set VELVETROPE_KAFKA_BROKERS or kafka.brokers"))
	}
	return nil
}

func checkerModule(app config.App, logger *slog.Logger) fx.Option {
	return fx.Options(
		fx.Supply(app, logger),
		fx.Provide(
			newShutdown,
			newRegistry,
			newRuleStore,
			newRedis,
			newCounters,
			newKafkaProducer,
			newDeferredWriter,
			func(sd *shutdown, app config.App, logger *slog.Logger, rules *config.Store, store *counters.Redis,
				prod *events.KafkaProducer) (*checker.Checker, error) {
				c, err := checker.New(checkerConfig(app, logger), rules, store, prod, limiter.SystemClock{})
				if err != nil {
					return nil, staged("checker", err)
				}
				sd.hook(stopWork, "checker", c.Start, c.Stop)
				return c, nil
			},
			newDecisionCounter,
			newRLS,
			newAnalyticsReader,
			func(sd *shutdown, app config.App, c *checker.Checker, n *decisions.Counter, rs *rls.Server,
				rc redis.UniversalClient, prod *events.KafkaProducer, rules *config.Store, an *sink.ClickHouse,
				logger *slog.Logger, dw *events.KafkaWriter, store *counters.Redis, reg *metrics.Registry) (*httpapi.Server, error) {
				h := analytics.New(nil, "analytics are off: set clickhouse.addr (VELVETROPE_CLICKHOUSE_ADDR) on the checker", logger)
				if an != nil {
					h = analytics.New(an, "", logger)
				}
				return newCheckerHTTP(sd, app, c, n, rs, rules, logger, prod, h, func() error {
					if err := c.StoreReady(); err != nil {
						return err
					}
					ctx, cancel := context.WithTimeout(context.Background(), app.Checker.StoreTimeout)
					defer cancel()
					return rc.Ping(ctx).Err()
				}, newQueue(dw, store, app, c), store, nil, nil, reg)
			},
		),
		fx.Invoke(watchRules),
	)
}

// newKafkaProducer is the checker's producer; its spill file lives in the
// state directory, named after the instance.
func newKafkaProducer(sd *shutdown, app config.App, logger *slog.Logger) (*events.KafkaProducer, error) {
	if err := requireKafka(app); err != nil {
		return nil, err
	}
	spill := app.Checker.SpillPath
	if spill == "" {
		dir, err := config.ResolveStateDir(app.Checker.StateDir, nil)
		if err != nil {
			return nil, staged("config", err)
		}
		spill = filepath.Join(dir, app.InstanceID+".spill")
	}
	sec, err := kafkaSecurity(app)
	if err != nil {
		return nil, staged("kafka", err)
	}
	p, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: app.Kafka.Brokers, Topic: app.Kafka.Topic, Security: sec, Compression: app.Kafka.Compression,
		Partitions: app.Checker.TopicPartitions, SpillPath: spill, SpillMaxBytes: app.Checker.SpillMaxBytes,
		Logger: logger})
	if err != nil {
		return nil, staged("kafka", err)
	}
	sd.hook(stopProducer, "kafka", p.Start, p.Close)
	return p, nil
}

// rlsMetrics exposes the Envoy rate limit service's calls by outcome.
func rlsMetrics(reg *metrics.Registry, s *rls.Server) {
	reg.Labeled("velvetrope_rls_calls_total", "ShouldRateLimit calls (gRPC and /json) by outcome.", "counter", "code",
		func() map[string]float64 {
			return map[string]float64{"ok": float64(s.Stats.OK.Load()), "over_limit": float64(s.Stats.OverLimit.Load()),
				"invalid_argument": float64(s.Stats.Invalid.Load()), "internal": float64(s.Stats.Errors.Load())}
		})
}

func checkerMetrics(reg *metrics.Registry, c *checker.Checker, prod events.Producer) {
	snap := func(f func(checker.Snapshot) uint64) func() float64 {
		return func() float64 { return float64(f(c.Snapshot())) }
	}
	reg.Counter("velvetrope_checker_decisions_total", "Decisions made.", snap(func(s checker.Snapshot) uint64 { return s.Decisions }))
	reg.Counter("velvetrope_checker_denied_total", "Decisions that refused the request.", snap(func(s checker.Snapshot) uint64 { return s.Denied }))
	reg.Counter("velvetrope_checker_far_band_total", "Descriptors decided from memory far from their limit.", snap(func(s checker.Snapshot) uint64 { return s.FarBand }))
	reg.Counter("velvetrope_checker_near_band_total", "Descriptors decided in the near-limit band.", snap(func(s checker.Snapshot) uint64 { return s.NearBand }))
	reg.Counter("velvetrope_checker_over_band_total", "Descriptors refused from memory over their limit.", snap(func(s checker.Snapshot) uint64 { return s.OverBand }))
	reg.Counter("velvetrope_checker_store_charges_total", "Atomic charges in the counter store.", snap(func(s checker.Snapshot) uint64 { return s.SyncCharges }))
	reg.Counter("velvetrope_checker_degraded_total", "Decisions made by a failure policy.", snap(func(s checker.Snapshot) uint64 { return s.Degraded }))
	reg.Counter("velvetrope_checker_deltas_emitted_total", "Consumption deltas handed to the producer.", snap(func(s checker.Snapshot) uint64 { return s.DeltasEmitted }))
	reg.Counter("velvetrope_checker_emit_errors_total", "Flushes the producer refused.", snap(func(s checker.Snapshot) uint64 { return s.EmitErrors }))
	reg.Counter("velvetrope_checker_refresh_errors_total", "Counter refreshes that failed.", snap(func(s checker.Snapshot) uint64 { return s.RefreshErrors }))
	reg.Counter("velvetrope_checker_evictions_total", "Keys evicted from the table.", snap(func(s checker.Snapshot) uint64 { return s.Evictions }))
	reg.Gauge("velvetrope_checker_keys", "Counter keys held in memory.", func() float64 { return float64(c.Snapshot().Keys) })
	reg.Gauge("velvetrope_checker_held_hits", "Hits far-from-limit keys hold back, decided in memory and not yet emitted (at most checker.max_held_hits_total): what a kill -9 would lose beside one flush.",
		func() float64 { return float64(c.Snapshot().HeldHits) })
	reg.Gauge("velvetrope_checker_key_bytes", "The heap the key table holds, as estimated for checker.max_bytes.", func() float64 { return float64(c.Snapshot().KeyBytes) })
	reg.Labeled("velvetrope_checker_store_errors_total", "Counter store calls that failed, by operation (charge: the failure policy decided; read: a refresh; controls: reading operator controls).",
		"counter", "op", func() map[string]float64 {
			s := c.Snapshot()
			return map[string]float64{"charge": float64(c.Stats.StoreErrors.Load()), "read": float64(s.RefreshErrors), "controls": float64(s.ControlErrors)}
		})
	reg.Gauge("velvetrope_checker_store_breaker_state", "The counter store's circuit breaker: 0 closed, 1 half-open (one call probing), 2 open (no calls; failure policies decide).",
		func() float64 { st, _, _ := c.Breaker(); return float64(st) })
	reg.Counter("velvetrope_checker_store_breaker_opens_total", "Times the breaker opened after consecutive store failures.",
		func() float64 { _, o, _ := c.Breaker(); return float64(o) })
	reg.Counter("velvetrope_checker_store_breaker_rejected_total", "Store calls the open breaker refused without waiting.",
		func() float64 { _, _, r := c.Breaker(); return float64(r) })
	reg.Histogram("velvetrope_checker_emit_latency_seconds", "From a key's first pending decision to the producer accepting its delta.", &c.Stats.EmitLatency)
	reg.Histogram("velvetrope_checker_refresh_staleness_seconds", "Age of a key's store view when a refresh replaces it.", &c.Stats.Staleness)
	reg.Gauge("velvetrope_checker_live_instances", "Checkers sharing the counter store, as its registry last said.",
		func() float64 { l, _, _ := c.Fleet(); return float64(l) })
	reg.Gauge("velvetrope_checker_clock_skew_seconds", "The counter store's clock minus this checker's own, at the last heartbeat.",
		func() float64 { _, s, _ := c.Fleet(); return s.Seconds() })
	reg.Gauge("velvetrope_checker_clock_adjustment_seconds", "What is added to this checker's clock to keep it within checker.max_clock_skew of the store's.",
		func() float64 { _, _, a := c.Fleet(); return a.Seconds() })
	reg.Gauge("velvetrope_checker_queue_keys", "Keys with consumption not yet emitted.", func() float64 { k, _, _ := c.Queue(); return float64(k) })
	reg.Gauge("velvetrope_checker_queue_lazy_keys", "Of those, keys far from their limits whose emission waits (up to checker.max_emit_interval).",
		func() float64 { _, l, _ := c.Queue(); return float64(l) })
	reg.Gauge("velvetrope_checker_queue_buffered_deltas", "Deltas the producer refused, waiting for the next flush.", func() float64 { _, _, b := c.Queue(); return float64(b) })
	reg.Counter("velvetrope_checker_controlled_total", "Descriptors an operator control (allow, deny, limit) decided.", snap(func(s checker.Snapshot) uint64 { return s.Controlled }))
	reg.Gauge("velvetrope_checker_controls", "Operator controls in force.", func() float64 { return float64(len(c.Controls())) })
	if d, ok := prod.(events.DropCounter); ok { // on every bus
		reg.Counter("velvetrope_producer_dropped_total", "Deltas set aside for good: invalid, above the record bound, or refused by the broker for what they are (logged; they never hold up the others).",
			func() float64 { return float64(d.DroppedDeltas()) })
	}
	kp, ok := prod.(*events.KafkaProducer)
	if !ok {
		return // velvetrope dev: the in-memory bus has no spill file
	}
	reg.Counter("velvetrope_producer_spilled_total", "Deltas written to the spill file.", func() float64 { return float64(kp.Spilled.Load()) })
	reg.Gauge("velvetrope_producer_spill_records", "Deltas waiting in the spill file.", func() float64 { return float64(kp.SpillRecords()) })
	reg.Gauge("velvetrope_producer_spill_bytes", "Bytes of the spill file not yet replayed.", func() float64 { return float64(kp.SpillBytes()) })
	reg.Counter("velvetrope_producer_kafka_errors_total", "Writes Kafka refused in part or whole (the deltas went to the spill file).", func() float64 { return float64(kp.KafkaErrors.Load()) })
	reg.Counter("velvetrope_producer_failed_total", "Produce calls that failed with the spill file unable to take the deltas (the checker keeps them buffered).", func() float64 { return float64(kp.Failed.Load()) })
}

// newUsageWriter is the analytics sink of the aggregator: with
// clickhouse.addr, a buffered writer into ClickHouse, started and stopped
// with the process (stopped after the aggregator, so the last batch's rows
// are written); ClickHouse may be down at start: the writer buffers and
// migrates once it answers. Without an address there is no sink (nil).
func newUsageWriter(sd *shutdown, app config.App, logger *slog.Logger) (*sink.Writer, error) {
	ch := app.ClickHouse
	if ch.Addr == "" {
		logger.Info("no ClickHouse configured (clickhouse.addr, VELVETROPE_CLICKHOUSE_ADDR): running without the analytics sink")
		return nil, nil
	}
	store, err := clickHouse(app, logger)
	if err != nil {
		return nil, staged("clickhouse", err)
	}
	w, err := sink.NewWriter(sink.WriterConfig{FlushInterval: ch.FlushInterval, MaxRows: ch.MaxRows, Logger: logger}, store)
	if err != nil {
		return nil, staged("clickhouse", err)
	}
	sd.hook(stopProducer, "clickhouse", func(ctx context.Context) error {
		mctx, cancel := context.WithTimeout(ctx, 3*time.Second) // never hold up the start for ClickHouse
		defer cancel()
		if err := store.Migrate(mctx); err != nil {
			logger.Warn("ClickHouse not ready at start; usage is buffered until it answers", "addr", ch.Addr, "error", err)
		}
		return w.Start(ctx)
	}, func(ctx context.Context) error {
		err := w.Stop(ctx)
		store.Close()
		return err
	})
	return w, nil
}

// newAnalyticsReader is the ClickHouse the checker's analytics endpoints
// read, when clickhouse.addr is set (nil otherwise). It connects lazily:
// a checker never waits on ClickHouse to decide.
func newAnalyticsReader(sd *shutdown, app config.App, logger *slog.Logger) (*sink.ClickHouse, error) {
	if app.ClickHouse.Addr == "" {
		return nil, nil
	}
	store, err := clickHouse(app, logger)
	if err != nil {
		return nil, staged("clickhouse", err)
	}
	sd.stop(stopClients, "clickhouse", func(context.Context) error { return store.Close() })
	return store, nil
}

// clickHouse is the sink's store as the application config describes it.
func clickHouse(app config.App, logger *slog.Logger) (*sink.ClickHouse, error) {
	ch := app.ClickHouse
	tc, err := tlsconf.Client(ch.TLS, "clickhouse.tls")
	if err != nil {
		return nil, err
	}
	return sink.NewClickHouse(sink.ClickHouseConfig{Addr: ch.Addr, Database: ch.Database, Username: ch.Username,
		Password: ch.Password, TLS: tc, RetentionDays: ch.RetentionDays, Logger: logger})
}

// sinkMetrics exposes the analytics writer's buffer and writes.
func sinkMetrics(reg *metrics.Registry, w *sink.Writer) {
	reg.Gauge("velvetrope_sink_rows_buffered", "Usage rows waiting to be written.", func() float64 { return float64(w.Stats.Rows.Load()) })
	reg.Counter("velvetrope_sink_rows_written_total", "Usage rows written.", func() float64 { return float64(w.Stats.Written.Load()) })
	reg.Counter("velvetrope_sink_rows_dropped_total", "Usage rows dropped over the buffer bound (analytics lost; counters exact).",
		func() float64 { return float64(w.Stats.Dropped.Load()) })
	reg.Counter("velvetrope_sink_write_errors_total", "Failed writes of usage rows (retried).", func() float64 { return float64(w.Stats.WriteErrors.Load()) })
	reg.Gauge("velvetrope_sink_last_write_age_seconds", "Seconds since usage rows were last written (-1: never).", func() float64 {
		if t := w.Stats.LastWrite.Load(); t > 0 {
			return time.Since(time.Unix(0, t)).Seconds()
		}
		return -1
	})
}

func aggregatorModule(app config.App, logger *slog.Logger) fx.Option {
	return fx.Options(
		fx.Supply(app, logger),
		fx.Provide(
			newShutdown,
			newRegistry,
			newAggregatorRedis,
			newCounters,
			newUsageWriter,
			func(sd *shutdown, app config.App, logger *slog.Logger, store *counters.Redis, usage *sink.Writer) (*aggregator.Kafka, error) {
				if err := requireKafka(app); err != nil {
					return nil, err
				}
				sec, err := kafkaSecurity(app)
				if err != nil {
					return nil, staged("kafka", err)
				}
				ag := app.Aggregator
				cfg := aggregator.Config{Brokers: app.Kafka.Brokers, Topic: app.Kafka.Topic,
					Group: ag.Group, Partitions: app.Checker.TopicPartitions, BatchSize: ag.BatchSize, BatchWait: ag.BatchWait,
					SessionTimeout: ag.SessionTimeout, HeartbeatInterval: ag.HeartbeatInterval,
					RebalanceTimeout: ag.RebalanceTimeout, Security: sec, Logger: logger}
				if usage != nil { // a nil *sink.Writer must not become a non-nil interface
					cfg.Analytics = usage
				}
				a, err := aggregator.NewKafka(cfg, store)
				if err != nil {
					return nil, staged("aggregator", err)
				}
				// its start joins the delta topic's consumer group
				sd.hook(stopWork, "kafka", a.Start, a.Stop)
				return a, nil
			},
			func(sd *shutdown, app config.App, a *aggregator.Kafka, usage *sink.Writer, reg *metrics.Registry) (*httpapi.Server, error) {
				mux := http.NewServeMux()
				if usage != nil {
					sinkMetrics(reg, usage)
				}
				reg.Counter("velvetrope_aggregator_batches_total", "Batches applied and committed.", func() float64 { return float64(a.Stats.Batches.Load()) })
				reg.Counter("velvetrope_aggregator_deltas_applied_total", "Deltas applied to Redis.", func() float64 { return float64(a.Stats.Applied.Load()) })
				reg.Counter("velvetrope_aggregator_deltas_skipped_total", "Copies skipped by the sequence check.", func() float64 { return float64(a.Stats.Skipped.Load()) })
				reg.Counter("velvetrope_aggregator_bad_records_total", "Malformed records skipped.", func() float64 { return float64(a.Stats.Bad.Load()) })
				reg.Counter("velvetrope_aggregator_deltas_already_applied_total", "Deltas a charge applied when it decided (analytics only, no Redis work).",
					func() float64 { return float64(a.Stats.AlreadyApplied.Load()) })
				reg.Counter("velvetrope_aggregator_redis_round_trips_total", "Redis round trips.", func() float64 { return float64(a.Stats.RoundTrips.Load()) })
				reg.Counter("velvetrope_aggregator_redis_scripts_total", "Redis script calls (one per counter and window of a batch).",
					func() float64 { return float64(a.Stats.Scripts.Load()) })
				reg.Counter("velvetrope_aggregator_redis_errors_total", "Failed applies (retried).", func() float64 { return float64(a.Stats.RedisErrors.Load()) })
				reg.Counter("velvetrope_aggregator_apply_seconds_total", "Time spent applying.", func() float64 { return float64(a.Stats.ApplyNanos.Load()) / 1e9 })
				reg.Gauge("velvetrope_aggregator_consumer_lag", "Messages the consumer is behind.", func() float64 { return float64(a.Lag()) })
				reg.Gauge("velvetrope_aggregator_last_batch_size", "Deltas in the last batch applied.", func() float64 { return float64(a.Stats.LastBatch.Load()) })
				reg.Labeled("velvetrope_aggregator_overshoot_hits_total", "Hits admitted above a window's limit, per rule.", "counter", "rule",
					func() map[string]float64 { o, _, _ := a.Accuracy.Report(); return o })
				reg.Labeled("velvetrope_aggregator_under_admission_hits_total", "Hits refused while the window ended below its limit, per rule.", "counter", "rule",
					func() map[string]float64 { _, u, _ := a.Accuracy.Report(); return u })
				reg.Labeled("velvetrope_aggregator_windows_total", "Windows judged for accuracy, per rule.", "counter", "rule",
					func() map[string]float64 { _, _, w := a.Accuracy.Report(); return w })
				mux.Handle("GET /metrics", reg)
				httpapi.Health(mux, a.Ready)
				return newHTTPServer(sd, app, mux, 10*time.Second, reg)
			},
		),
	)
}
