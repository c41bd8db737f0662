package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/fx/fxtest"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

var updateMetrics = flag.Bool("update-metrics", false, "rewrite testdata/metrics/*.txt from the processes' registries")

// TestProcessMetrics starts each process kind as runProcess builds it and
// holds the metrics its /metrics serves (name, kind, labels and help, each
// registered whether or not it has a sample yet) to
// testdata/metrics/KIND.txt: dashboards, alerts and docs/operations.md
// name them, and no wiring change may drop or reword one. dev runs in
// memory; the others against the real Redis, Kafka and ClickHouse.
func TestProcessMetrics(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		kind   string
		module func(t *testing.T) fx.Option
	}{
		{"dev", func(t *testing.T) fx.Option {
			app := config.DefaultApp()
			app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
			return devModule(app, quiet)
		}},
		{"checker", func(t *testing.T) fx.Option { return checkerModule(realApp(t), quiet) }},
		{"drain", func(t *testing.T) fx.Option { return drainModule(realApp(t), quiet) }},
		{"aggregator", func(t *testing.T) fx.Option {
			app := realApp(t)
			// with ClickHouse, the aggregator has its sink's metrics too
			app.ClickHouse.Addr, app.ClickHouse.Database = testsvc.ClickHouse(t), testsvc.Unique("metrics")
			return aggregatorModule(app, quiet)
		}},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			var reg *metrics.Registry
			// the listeners, as runProcess asks for them
			a := fxtest.New(t, c.module(t), fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
				fx.Invoke(func(in struct {
					fx.In
					HTTP *httpapi.Server
					GRPC *grpcListener `optional:"true"`
					Reg  *metrics.Registry
				}) {
					reg = in.Reg
				}))
			a.RequireStart()
			defer a.RequireStop()
			got := strings.Join(reg.Described(), "\n") + "\n"
			path := filepath.Join("testdata", "metrics", c.kind+".txt")
			if *updateMetrics {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("%s serves other metrics than %s (go test ./cmd/velvetrope -run TestProcessMetrics -update-metrics, with the services, rewrites it):\n%s",
					c.kind, path, lineDiff(string(want), got))
			}
		})
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
