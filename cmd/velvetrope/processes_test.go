package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/fx/fxtest"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

func realApp(t *testing.T) config.App {
	t.Helper()
	app := config.DefaultApp()
	app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
	app.Redis.Addrs = []string{testsvc.Redis(t)}
	app.Kafka.Brokers = []string{testsvc.Kafka(t)}
	app.Kafka.Topic = testsvc.Unique("proc")
	// a group of its own: tests sharing one group rebalance each other
	app.Aggregator.Group = testsvc.Unique("agg")
	app.Deferred.Group = testsvc.Unique("drain")
	app.InstanceID = testsvc.Unique("c")
	app.Checker.SpillPath = t.TempDir() + "/spill"
	// make test runs every package at once on 2 cores: a charge slower
	// than the default 150 ms would be decided by the failure policy (open:
	// admitted, its hits counted again by a delta, though Redis applied
	// them), which is not what these tests check. Seen once: remaining 96
	// where 97 was due.
	app.Checker.StoreTimeout = 5 * time.Second
	return app
}

// TestCheckerAndAggregatorProcesses starts both process graphs against the
// real Redis and Kafka and checks their HTTP surfaces.
func TestCheckerAndAggregatorProcesses(t *testing.T) {
	app := realApp(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var agg *httpapi.Server
	// the aggregator writes usage to ClickHouse, the checker reads it there
	app.ClickHouse.Addr, app.ClickHouse.Database = testsvc.ClickHouse(t), testsvc.Unique("proc")
	app.ClickHouse.FlushInterval = 200 * time.Millisecond
	aggApp := fxtest.New(t, aggregatorModule(app, quiet), fx.Populate(&agg))
	aggApp.RequireStart()
	defer aggApp.RequireStop()
	var chk *httpapi.Server
	var gl *grpcListener
	chkApp := fxtest.New(t, checkerModule(app, quiet), fx.Populate(&chk, &gl))
	chkApp.RequireStart()
	defer chkApp.RequireStop()

	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hits":1}`
	resp, err := http.Post("http://"+chk.Addr()+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var got httpjson.CheckResponse
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if got.Decision != "allow" || got.Statuses[0].Remaining != 99 {
		t.Fatalf("check: %+v", got)
	}
	checkEnvoyAPIs(t, chk.Addr(), gl.Addr(), 98)
	// The decisions reach ClickHouse through Kafka and the aggregator.
	metricValue(t, "http://"+agg.Addr()+"/metrics", "velvetrope_sink_rows_written_total", func(x float64) bool { return x > 0 })
	topDenied(t, chk.Addr())
	for _, url := range []string{"http://" + chk.Addr() + "/metrics", "http://" + agg.Addr() + "/metrics", "http://" + agg.Addr() + "/healthz"} {
		r, err := http.Get(url)
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("%s: %v %v", url, r, err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(url, "metrics") && !strings.Contains(string(b), "velvetrope_") {
			t.Fatalf("%s: no velvetrope_ metrics:\n%s", url, b)
		}
		// the gRPC call and the /json call of checkEnvoyAPIs
		// /v1/check, gRPC and /json: three decisions of api:user_id
		if url == "http://"+chk.Addr()+"/metrics" && (!strings.Contains(string(b), `velvetrope_rls_calls_total{code="ok"} 2`) ||
			!strings.Contains(string(b), `velvetrope_decisions_total{decision="allow",domain="api",mode="async",override="false",rule="api:user_id"} 3`)) {
			t.Fatalf("%s: Envoy API calls not counted:\n%s", url, b)
		}
		if url == "http://"+chk.Addr()+"/metrics" {
			for _, series := range []string{"velvetrope_checker_emit_latency_seconds_count", "velvetrope_checker_refresh_staleness_seconds_bucket",
				`velvetrope_checker_store_errors_total{op="charge"} 0`, "velvetrope_producer_kafka_errors_total 0",
				"velvetrope_producer_spill_bytes 0", "velvetrope_checker_queue_keys", "velvetrope_checker_controls 0"} {
				if !strings.Contains(string(b), series) {
					t.Fatalf("%s: no %s:\n%s", url, series, b)
				}
			}
		}
	}
}

// metricValue polls url until the sample named series (with its labels)
// satisfies ok, or fails after 30 s.
func metricValue(t *testing.T, url, series string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, found := strings.CutPrefix(line, series+" "); found {
				var x float64
				if _, err := fmt.Sscan(v, &x); err == nil && ok(x) {
					return x
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s as wanted:\n%s", url, series, b)
		}
		time.Sleep(100 * time.Millisecond) // the real pipeline: checker → Kafka → aggregator → ClickHouse
	}
}

func TestProcessesNeedTheirBackends(t *testing.T) {
	app := config.DefaultApp()
	app.HTTP.Addr = "127.0.0.1:0"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, mod := range map[string]func(config.App, *slog.Logger) fx.Option{"checker": checkerModule, "aggregator": aggregatorModule, "drain": drainModule} {
		var srv *httpapi.Server
		a := fx.New(mod(app, quiet), fx.Populate(&srv))
		if err := a.Err(); err == nil || !strings.Contains(err.Error(), "VELVETROPE_REDIS_ADDRS") {
			t.Fatalf("%s without Redis: %v", name, err)
		}
	}
}

// TestRedisAuth: a Redis that requires a password is reached with the
// configured one and refused, naming Redis and never the secret, without.
func TestRedisAuth(t *testing.T) {
	const secret = "s3cret-redis-pw"
	addr := testsvc.StartRedisWithPassword(t, secret)
	for _, c := range []struct {
		password string
		ok       bool
	}{{secret, true}, {"wrong", false}, {"", false}} {
		app := config.DefaultApp()
		app.Redis.Addrs, app.Redis.Password = []string{addr}, c.password
		a := fxtest.New(t, fx.Supply(app), fx.Provide(newShutdown, newRedis), fx.Invoke(func(redis.UniversalClient) {}),
			fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }))
		err := a.Start(context.Background())
		if c.ok {
			if err != nil {
				t.Fatalf("right password: %v", err)
			}
			a.RequireStop()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "redis") || strings.Contains(err.Error(), secret) {
			t.Fatalf("password %q: %v", c.password, err)
		}
	}
}

// TestAggregatorStartsWithClickHouseDown: ClickHouse configured but not
// answering: the aggregator starts, counts into Redis, is healthy, and
// shows the failed writes in its metrics while it buffers.
func TestAggregatorStartsWithClickHouseDown(t *testing.T) {
	app := realApp(t)
	app.ClickHouse.Addr = "127.0.0.1:1" // nothing listens there
	app.ClickHouse.FlushInterval = 100 * time.Millisecond
	var agg *httpapi.Server
	aggApp := fxtest.New(t, aggregatorModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&agg))
	aggApp.RequireStart()
	defer aggApp.RequireStop()
	var chk *httpapi.Server
	chkApp := fxtest.New(t, checkerModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&chk))
	chkApp.RequireStart()
	defer chkApp.RequireStop()
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hits":1}`
	resp, err := http.Post("http://"+chk.Addr()+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	metricValue(t, "http://"+agg.Addr()+"/metrics", "velvetrope_sink_write_errors_total", func(x float64) bool { return x > 0 })
	metricValue(t, "http://"+agg.Addr()+"/metrics", "velvetrope_sink_rows_buffered", func(x float64) bool { return x > 0 })
	if r, err := http.Get("http://" + agg.Addr() + "/healthz"); err != nil || r.StatusCode != 200 {
		t.Fatalf("healthz with ClickHouse down: %v %v", r, err)
	}
}
