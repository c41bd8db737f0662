package main

import (
	"log/slog"

	"go.uber.org/fx"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/limiter"
)

// newRegistry is a process's one metrics registry, which its HTTP
// listener serves. Each component's provider registers the component's
// metrics on it, so that a process serves the metrics of what it runs.
func newRegistry() *metrics.Registry {
	reg := metrics.New()
	metrics.RegisterProcess(reg)
	return reg
}

// sharedBackends are the counter store and the delta producer of a
// checker that shares its counters with others (velvetrope checker and
// drain): Redis and Kafka. Each is provided as itself and as what the
// checker takes (checkerIn).
var sharedBackends = fx.Provide(
	newRedis,
	fx.Annotate(newCounters, fx.As(fx.Self()), fx.As(new(counters.Store))),
	fx.Annotate(newKafkaProducer, fx.As(fx.Self()), fx.As(new(events.Producer))),
)

// memBackends are dev's: the counter store and the bus in memory.
var memBackends = fx.Provide(
	fx.Annotate(counters.NewMemStore, fx.As(fx.Self()), fx.As(new(counters.Store))),
	fx.Annotate(newDevBus, fx.As(fx.Self()), fx.As(new(events.Producer))),
)

// checkerIn is what a process's checker is built from. Store and
// Producer are the process's backends (sharedBackends, memBackends).
type checkerIn struct {
	fx.In
	SD       *shutdown
	App      config.App
	Logger   *slog.Logger
	Rules    *config.Store
	Store    counters.Store
	Producer events.Producer
	Metrics  *metrics.Registry
	RulesDB  *rulesDB
}

// provideChecker is the one constructor of the checker of velvetrope
// checker, drain and dev: configured from the application config, its
// metrics registered, started and stopped as the step "checker" of
// stopWork (its last flush hands what is pending to the producer, which
// stops after it). instanceSuffix is appended to the instance id in the
// store's registry of checkers (a drain's: "-drain", so that it is not
// taken for the checker process of the same instance id).
func provideChecker(instanceSuffix string) fx.Option {
	return fx.Provide(func(in checkerIn) (*checker.Checker, error) {
		cfg := checkerConfig(in.App, in.Logger)
		cfg.InstanceName += instanceSuffix
		cfg.Plans = in.RulesDB.plans
		c, err := checker.New(cfg, in.Rules, in.Store, in.Producer, limiter.SystemClock{})
		if err != nil {
			return nil, staged("checker", err)
		}
		c.RegisterMetrics(in.Metrics)
		in.SD.hook(stopWork, "checker", c.Start, c.Stop)
		return c, nil
	})
}

// checkerConfig maps the application config onto the checker's.
func checkerConfig(app config.App, logger *slog.Logger) checker.Config {
	return checker.Config{CheckerConfig: app.Checker, InstanceName: app.InstanceID, LocalMaxKeys: app.Limiter.MaxKeys,
		IdempotencyTTL: app.Limiter.IdempotencyTTL, Bounds: app.Limits, Logger: logger}
}
