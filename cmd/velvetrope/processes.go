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
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/analytics"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/tlsconf"
	"github.com/velvetrope/velvetrope/sink"
)

// runChecker implements `velvetrope checker`: the check API over the
// async checker, sharing counters through Redis and Kafka.
func runChecker(args []string, stdout, stderr io.Writer) int {
	adminOff := false
	module := func(app config.App, logger *slog.Logger) fx.Option {
		adminOff = len(app.Admin.Named()) == 0
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
		fx.Provide(newShutdown, newRegistry, newRuleStore, newRulesDB, newXDS),
		sharedBackends,
		provideChecker(""),
		fx.Provide(
			newDeferredWriter,
			newDecisionCounter,
			newRLS,
			newAnalyticsReader,
			newCheckerProcessHTTP,
		),
		fx.Invoke(watchRules),
	)
}

// checkerProcessIn is what the checker process's listener takes beside
// what every deciding process's does: the clients its readiness and
// analytics read, and the deferred topic and tickets of its queue.
type checkerProcessIn struct {
	fx.In
	Common     checkerHTTPIn
	Redis      redis.UniversalClient
	ClickHouse *sink.ClickHouse // nil: analytics are off
	Deferred   *events.KafkaWriter
	Tickets    *counters.Redis
}

// newCheckerProcessHTTP is the checker process's listener: analytics
// from ClickHouse when configured, ready while the breaker is closed and
// Redis answers.
func newCheckerProcessHTTP(in checkerProcessIn) (*httpapi.Server, error) {
	c, app, logger := in.Common.Checker, in.Common.App, in.Common.Logger
	h := analytics.New(nil, "analytics are off: set clickhouse.addr (VELVETROPE_CLICKHOUSE_ADDR) on the checker", logger)
	var audit sink.RuleAudit // a nil *sink.ClickHouse must stay a nil interface
	if in.ClickHouse != nil {
		h, audit = analytics.New(in.ClickHouse, "", logger), in.ClickHouse
	}
	return newCheckerHTTP(in.Common, h, in.Deferred, in.Tickets, func() error {
		if err := c.StoreReady(); err != nil {
			return err
		}
		if err := in.Common.RulesDB.ready(app); err != nil {
			return err
		}
		if err := in.Common.XDS.ready(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), app.Checker.StoreTimeout)
		defer cancel()
		return in.Redis.Ping(ctx).Err()
	}, audit)
}

// newKafkaProducer is the checker's producer; its spill file lives in the
// state directory, named after the instance.
func newKafkaProducer(sd *shutdown, app config.App, logger *slog.Logger, reg *metrics.Registry) (*events.KafkaProducer, error) {
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
	p.RegisterMetrics(reg)
	sd.hook(stopProducer, "kafka", p.Start, p.Close)
	return p, nil
}

// newUsageWriter is the analytics sink of the aggregator: with
// clickhouse.addr, a buffered writer into ClickHouse, started and stopped
// with the process (stopped after the aggregator, so the last batch's rows
// are written); ClickHouse may be down at start: the writer buffers and
// migrates once it answers. Without an address there is no sink (nil).
func newUsageWriter(sd *shutdown, app config.App, logger *slog.Logger, reg *metrics.Registry) (*sink.Writer, error) {
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
	w.RegisterMetrics(reg)
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

func aggregatorModule(app config.App, logger *slog.Logger) fx.Option {
	return fx.Options(
		fx.Supply(app, logger),
		fx.Provide(
			newShutdown,
			newRegistry,
			newAggregatorRedis,
			newCounters,
			newUsageWriter,
			newAggregator,
			func(sd *shutdown, app config.App, a *aggregator.Kafka, reg *metrics.Registry) (*httpapi.Server, error) {
				mux := http.NewServeMux()
				mux.Handle("GET /metrics", reg)
				httpapi.Health(mux, a.Ready)
				return newHTTPServer(sd, app, mux, 10*time.Second, reg)
			},
		),
	)
}

// aggregatorIn is what the aggregator is built from.
type aggregatorIn struct {
	fx.In
	SD      *shutdown
	App     config.App
	Logger  *slog.Logger
	Store   *counters.Redis
	Usage   *sink.Writer // nil: no analytics sink
	Metrics *metrics.Registry
}

// newAggregator is the aggregator process's consumer of the delta topic,
// applying the deltas to Redis and their usage to the sink.
func newAggregator(in aggregatorIn) (*aggregator.Kafka, error) {
	app := in.App
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
		RebalanceTimeout: ag.RebalanceTimeout, Security: sec, Logger: in.Logger}
	if in.Usage != nil { // a nil *sink.Writer must not become a non-nil interface
		cfg.Analytics = in.Usage
	}
	a, err := aggregator.NewKafka(cfg, in.Store)
	if err != nil {
		return nil, staged("aggregator", err)
	}
	a.RegisterMetrics(in.Metrics)
	// its start joins the delta topic's consumer group
	in.SD.hook(stopWork, "kafka", a.Start, a.Stop)
	return a, nil
}
