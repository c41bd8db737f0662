package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/dig"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/velvetrope/velvetrope/aggregator"
	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/admin"
	"github.com/velvetrope/velvetrope/internal/analytics"
	"github.com/velvetrope/velvetrope/internal/dashboard"
	"github.com/velvetrope/velvetrope/internal/decisions"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/operate"
	"github.com/velvetrope/velvetrope/rls"
	"github.com/velvetrope/velvetrope/rulesync"
	"github.com/velvetrope/velvetrope/sink"
)

// runDev implements `velvetrope dev`: the HTTP check API over the whole
// pipeline (async checker, event bus, aggregator, counter store) on
// in-memory backends, with the built-in example rules unless --rules says
// otherwise, and an admin token generated for the run unless admin.token
// is set. It runs until SIGINT or SIGTERM.
func runDev(args []string, stdout, stderr io.Writer) int {
	var b devBanner
	module := func(app config.App, logger *slog.Logger) fx.Option {
		b = newDevBanner(&app, os.LookupEnv)
		if app.RulesStore.Backend == "" {
			app.RulesStore.Backend = "memory" // dev's rules store is in memory unless told otherwise
		}
		return fx.Options(devModule(app, logger), fx.Invoke(func(rules *config.Store) {
			b.example = exampleRequest(rules.Load()) // the hints over the rules loaded
		}))
	}
	return runProcess("dev", args, stdout, stderr, module, func(w io.Writer, httpAddr, grpcAddr string) {
		printBanner(w, httpAddr, grpcAddr, b)
	})
}

// startTimeout bounds a process's start (and its stop).
const startTimeout = 30 * time.Second

// runProcess loads the configuration, builds the process from module with
// fx, starts it, prints the banner, and stops it on SIGINT or SIGTERM. A
// start that fails prints its cause on one line (startup.go) and exits 1;
// with --debug, fx's own text of the error and its event log too.
func runProcess(name string, args []string, stdout, stderr io.Writer,
	module func(config.App, *slog.Logger) fx.Option, banner func(w io.Writer, httpAddr, grpcAddr string)) int {
	app, debug, err := processConfig(name, args, stdout)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		var se *stageError
		if errors.As(err, &se) {
			printStartFailure(stderr, name, err, nil)
			return 1
		}
		fmt.Fprintf(stderr, "velvetrope %s: %v\n", name, err)
		return 2 // a command line that does not parse
	}
	var fxLog fxevent.Logger = fxevent.NopLogger
	held, stopHold := holdLogs(stderr, logHoldMax)
	defer stopHold()
	var logOut io.Writer = held
	if debug {
		fxLog, logOut = &fxevent.ConsoleLogger{W: stderr}, stderr
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	quietRedis(logger)
	fxApp := fx.New(module(app, logger), fx.WithLogger(func() fxevent.Logger { return fxLog }),
		fx.Invoke(servePprof), fx.Invoke(func(in struct {
			fx.In
			LC   fx.Lifecycle
			HTTP *httpapi.Server
			GRPC *grpcListener `optional:"true"`
		}) {
			in.LC.Append(fx.Hook{OnStart: func(context.Context) error {
				banner(stdout, in.HTTP.Addr(), in.GRPC.Addr())
				return nil
			}})
		}))
	if err := fxApp.Err(); err != nil {
		printStartFailure(stderr, name, err, nil)
		return 1
	}
	trace := &startTrace{timeout: startTimeout}
	startCtx, cancel := context.WithTimeout(context.WithValue(context.Background(), startTraceKey{}, trace), startTimeout)
	defer cancel()
	if err := fxApp.Start(startCtx); err != nil {
		printStartFailure(stderr, name, err, trace)
		return 1
	}
	held.release()
	sig := <-fxApp.Wait()
	logger.Info("stopping", "signal", sig.Signal.String())
	stopCtx, cancel2 := context.WithTimeout(context.Background(), startTimeout)
	defer cancel2()
	if err := fxApp.Stop(stopCtx); err != nil {
		fmt.Fprintf(stderr, "velvetrope %s: stop: %v\n", name, dig.RootCause(err))
		return 1
	}
	return 0
}

// processConfig reads flags over the environment over the config file.
// A process is given only the flags it uses (processes): --help lists
// them, and any other is refused. A configuration that does not load is
// an error of the stage "config"; any other error is the command line's.
func processConfig(name string, args []string, stdout io.Writer) (app config.App, debug bool, err error) {
	p := processes[name]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	rules, grpcAddr := new(string), new(string)
	if p.rules {
		fs.StringVar(rules, "rules", "", "rule file or directory (comma-separated for several; default VELVETROPE_RULES)")
	}
	httpAddr := fs.String("http", "", "HTTP listen address (default :8080, or VELVETROPE_HTTP_ADDR)")
	if p.grpc {
		fs.StringVar(grpcAddr, "grpc", "", "gRPC (Envoy rate limit service) listen address (default :8081, or VELVETROPE_GRPC_ADDR)")
	}
	file := fs.String("config", "", "application config file (YAML)")
	fs.BoolVar(&debug, "debug", false, "print fx's event log (a failed start: with fx's whole text of the error) and log lines from the start on")
	if err := p.parse(fs, args, stdout); err != nil {
		return config.App{}, false, err
	}
	if fs.NArg() > 0 {
		return config.App{}, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var overrides []config.Override
	if *rules != "" {
		overrides = append(overrides, config.Override{Key: "rules", From: "--rules", Set: func(a *config.App) { a.Rules = strings.Split(*rules, ",") }})
	}
	if *httpAddr != "" {
		overrides = append(overrides, config.Override{Key: "http.addr", From: "--http", Set: func(a *config.App) { a.HTTP.Addr = *httpAddr }})
	}
	if *grpcAddr != "" {
		overrides = append(overrides, config.Override{Key: "grpc.addr", From: "--grpc", Set: func(a *config.App) { a.GRPC.Addr = *grpcAddr }})
	}
	// Only the variables the process reads (its --help lists them): one
	// environment file shared by every process must not stop the
	// aggregator over a bad VELVETROPE_GRPC_ADDR it never uses.
	getenv := func(k string) (string, bool) {
		if !slices.Contains(p.env, k) {
			return "", false
		}
		return os.LookupEnv(k)
	}
	app, err = config.LoadApp(*file, getenv, overrides...)
	return app, debug, staged("config", err)
}

// devModule wires the dev process: the async checker over the in-memory
// counter store, the in-memory event bus and the embedded aggregator — the
// whole pipeline in one process. cmd/ is the only place that knows fx.
func devModule(app config.App, logger *slog.Logger) fx.Option {
	return fx.Options(
		fx.Supply(app, logger),
		fx.Provide(newShutdown, newRegistry, newRuleStore, newRulesDB, newXDS),
		memBackends,
		provideChecker(""),
		fx.Provide(
			newDevUsage,
			newDecisionCounter,
			newRLS,
			newDevDeferred,
			newDevDrain,
			newDevHTTP,
		),
		fx.Invoke(watchRules, runEmbeddedAggregator, expireCounters, startDrain),
	)
}

// runEmbeddedAggregator applies the bus's deltas to the in-memory store
// and hands them to the usage writer.
func runEmbeddedAggregator(sd *shutdown, bus *events.MemBus, store *counters.MemStore, usage *sink.Writer, logger *slog.Logger) {
	agg := aggregator.NewEmbedded(bus, store, logger).WithAnalytics(usage)
	// dev's producer is the bus: the checker's final flush lands on it
	// (stopWork) before the aggregator stops, then the bus closes
	// (registered first in the stage: stopped after).
	sd.stop(stopProducer, "bus", bus.Close)
	sd.hook(stopProducer, "aggregator", agg.Start, agg.Stop)
}

// expireCounters drops in-memory counters that carry no information.
func expireCounters(sd *shutdown, store *counters.MemStore) {
	stop, done := make(chan struct{}), make(chan struct{})
	sd.hook(stopClients, "expiry", func(context.Context) error {
		go func() {
			defer close(done)
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case now := <-t.C:
					store.Expire(now.UnixNano())
				}
			}
		}()
		return nil
	}, func(ctx context.Context) error {
		close(stop)
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// newRuleStore loads the rule files (the built-in example without any)
// into the live rule set and the sources the rules store's domains join.
func newRuleStore(app config.App, logger *slog.Logger) (*config.Store, *rulesync.Sources, error) {
	var files []*config.File
	var err error
	if len(app.Rules) == 0 {
		var f *config.File
		if f, err = config.ExampleRuleFile(); err == nil {
			files = []*config.File{f}
		}
		logger.Info("using the built-in example rules", "file", config.ExampleRulesPath)
	} else {
		files, err = config.ReadRuleFiles(app.Rules...)
	}
	var rs *config.RuleSet
	if err == nil {
		rs, err = config.Compile(files)
	}
	if err != nil {
		return nil, nil, staged("rules", err)
	}
	logger.Info("rules loaded", "domains", strings.Join(rs.Domains(), ","), "rules", len(rs.Rules()))
	store := config.NewStore(rs)
	return store, rulesync.NewSources(store, files), nil
}

// watchRules reloads rule files on change, keeping the last good set; the
// rules store's domains stay beside them.
func watchRules(sd *shutdown, app config.App, store *config.Store, src *rulesync.Sources, logger *slog.Logger) error {
	if len(app.Rules) == 0 {
		return nil
	}
	w, err := config.NewWatcher(store, app.RulesReload, app.Rules...)
	if err != nil {
		return staged("rules", err)
	}
	w.Use = src.SetFiles
	w.OnReload = func(rs *config.RuleSet) {
		logger.Info("rules reloaded", "domains", strings.Join(rs.Domains(), ","), "rules", len(rs.Rules()))
	}
	w.OnError = func(err error) { logger.Error("rules rejected; the previous rules stay live", "error", err) }
	sd.hook(stopClients, "rules", w.Start, w.Stop)
	return nil
}

// devHTTPIn is what dev's listener takes beside what every deciding
// process's does: its in-memory analytics, deferred topic and tickets.
type devHTTPIn struct {
	fx.In
	Common   checkerHTTPIn
	Usage    *sink.Memory
	Deferred devDeferred
	Tickets  *counters.MemStore
}

// newDevHTTP is dev's listener: always ready, analytics from memory.
func newDevHTTP(in devHTTPIn) (*httpapi.Server, error) {
	c := in.Common
	return newCheckerHTTP(c, analytics.New(in.Usage, "", c.Logger), in.Deferred.pub, in.Tickets, nil, in.Usage)
}

// newDevBus is dev's event bus: 16 partitions, at most 1<<20 deltas
// waiting for the embedded aggregator; the deltas it sets aside are logged.
func newDevBus(logger *slog.Logger, reg *metrics.Registry) (*events.MemBus, error) {
	b, err := events.NewMemBus(16, 1<<20)
	if err != nil {
		return nil, err
	}
	b.SetLogger(logger)
	b.RegisterMetrics(reg)
	return b, nil
}

// newDevUsage is dev's analytics store: usage in memory for a day, within
// analytics.memory_max_bytes, fed by the embedded aggregator through a
// writer that flushes every second.
func newDevUsage(sd *shutdown, app config.App, logger *slog.Logger, reg *metrics.Registry) (*sink.Memory, *sink.Writer, error) {
	mem := sink.NewMemory(24 * time.Hour)
	mem.SetMaxBytes(app.Analytics.MemoryMaxBytes)
	mem.RegisterMetrics(reg)
	w, err := sink.NewWriter(sink.WriterConfig{FlushInterval: 100 * time.Millisecond, Logger: logger}, mem)
	if err != nil {
		return nil, nil, staged("analytics", err)
	}
	sd.hook(stopClients, "analytics", w.Start, w.Stop)
	return mem, w, nil
}

// newDecisionCounter counts the decisions the APIs answer, per rule.
func newDecisionCounter(rules *config.Store, reg *metrics.Registry) *decisions.Counter {
	n := decisions.New(rules.Load)
	n.Register(reg)
	return n
}

// checkerHTTPIn is what the HTTP listener of every process that decides
// (dev and checker) takes.
type checkerHTTPIn struct {
	fx.In
	SD        *shutdown
	App       config.App
	Checker   *checker.Checker
	Decisions *decisions.Counter
	RLS       *rls.Server
	Rules     *config.Store
	Logger    *slog.Logger
	Metrics   *metrics.Registry
	Store     counters.Store // the checker's, for its operator (admin)
	RulesDB   *rulesDB
	XDS       *xdsRules
}

// newCheckerHTTP is the HTTP listener of a process that decides (dev and
// checker): the check API, Envoy's /json, admin, metrics and health.
// Its queue appends deferred requests to topic and keeps their tickets
// in tickets; ready nil means always ready.
func newCheckerHTTP(in checkerHTTPIn, an *analytics.Handler, topic events.Publisher, tickets counters.Deferrals,
	ready func() error, audit sink.RuleAudit) (*httpapi.Server, error) {
	app, c := in.App, in.Checker
	q := newQueue(topic, tickets, app, c)
	q.RegisterMetrics(in.Metrics)
	mux := http.NewServeMux()
	an.WithRuleChanges(audit).WithAccess(analytics.Access{Token: app.Analytics.Token, MaxWindow: app.Analytics.MaxWindow,
		MaxConcurrent: app.Analytics.MaxConcurrent}).Register(mux)
	dashboard.Register(mux)
	mux.Handle("/v1/check", httpapi.CheckHandler(c, app.HTTP.MaxBodyBytes, logx.New(in.Logger, 10*time.Second), in.Decisions, httpapi.WithQueue(q),
		httpapi.WithBounds(app.Limits)))
	mux.Handle("/v1/charge", httpapi.ChargeHandler(c, app.HTTP.MaxBodyBytes, logx.New(in.Logger, 10*time.Second), httpapi.WithBounds(app.Limits)))
	mux.Handle("/v1/release", httpapi.ReleaseHandler(c, app.HTTP.MaxBodyBytes, logx.New(in.Logger, 10*time.Second)))
	mux.Handle("GET /v1/leases", httpapi.LeasesHandler(c))
	mux.Handle("GET /v1/deferred/{ticket}", httpapi.TicketHandler(tickets))
	mux.Handle("/json", rls.JSONHandler(in.RLS, app.HTTP.MaxBodyBytes))
	adm := admin.New(in.Rules, app.Rules, app.Admin.Token, app.HTTP.MaxBodyBytes, in.Logger).WithTokens(app.Admin.Tokens).WithKeys(operate.New(c, in.Store))
	if db := in.RulesDB.adminDB(app); db != nil {
		if audit != nil {
			db.Audit = func(ctx context.Context, c sink.RuleChange) error {
				c.Instance = app.InstanceID
				return audit.InsertRuleChange(ctx, c)
			}
			if d, ok := audit.(sink.Demander); ok {
				db.Demand, db.MaxWindow = d, app.Analytics.MaxWindow
			}
		}
		adm.WithRulesDB(*db)
	}
	adm.Register(mux)
	mux.Handle("GET /metrics", in.Metrics)
	httpapi.Health(mux, ready)
	return newHTTPServer(in.SD, app, mux, app.HTTP.WriteTimeout, in.Metrics)
}
