package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/fx/fxtest"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/httpapi"
)

// stopLog records the steps a shutdown runs, as "stage/name".
type stopLog struct {
	mu    sync.Mutex
	steps []string
}

func (l *stopLog) observe(stage stopStage, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, []string{"listeners", "work", "producer", "clients"}[stage]+"/"+name)
}

func (l *stopLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.steps)
}

// TestShutdownOrder starts the real wiring of dev (in memory) and of the
// checker (against the real Redis and Kafka) and stops it: the listeners
// close first, then the checker makes its last flush, then the producer
// (dev: the embedded aggregator and the bus) closes, then the clients.
func TestShutdownOrder(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		name   string
		module func(t *testing.T) (fx.Option, []string)
	}{
		{"dev", func(t *testing.T) (fx.Option, []string) {
			app := config.DefaultApp()
			app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
			return devModule(app, quiet), []string{"listeners/http", "listeners/grpc", "listeners/drain",
				"work/checker",
				"producer/deferred bus", "producer/aggregator", "producer/bus",
				"clients/expiry", "clients/analytics"}
		}},
		{"checker", func(t *testing.T) (fx.Option, []string) {
			app := realApp(t)
			return checkerModule(app, quiet), []string{"listeners/http", "listeners/grpc",
				"work/checker",
				"producer/kafka " + app.Kafka.DeferredTopic, "producer/kafka",
				"clients/redis"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mod, want := c.module(t)
			var sd *shutdown
			var srv *httpapi.Server // built as runProcess builds them: through the listeners
			var gl *grpcListener
			a := fxtest.New(t, mod, fx.Populate(&sd, &srv, &gl), fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }))
			a.RequireStart()
			var log stopLog
			sd.observe = log.observe
			a.RequireStop()
			if got := log.get(); !slices.Equal(got, want) {
				t.Fatalf("stop order:\n got %s\nwant %s", strings.Join(got, ", "), strings.Join(want, ", "))
			}
		})
	}
}

// TestShutdownPartialStart: a start that fails part way stops only the
// steps that started, still in stage order; a step whose stop fails
// does not keep the later ones from stopping, and its error is returned.
func TestShutdownPartialStart(t *testing.T) {
	boom, stopErr := errors.New("boom"), errors.New("stop failed")
	cases := []struct {
		name     string
		failAt   string // the step whose start fails ("": none)
		want     []string
		startErr error
		stopErr  error
	}{
		{"all started", "", []string{"listeners/http", "work/checker", "producer/kafka", "clients/redis"}, nil, stopErr},
		{"the listener fails", "http", []string{"work/checker", "producer/kafka", "clients/redis"}, boom, stopErr},
		{"the checker fails", "checker", []string{"producer/kafka", "clients/redis"}, boom, nil},
		{"redis fails", "redis", nil, boom, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var log stopLog
			a := fx.New(fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
				fx.Provide(newShutdown), fx.Invoke(func(sd *shutdown) {
					sd.observe = log.observe
					step := func(stage stopStage, name string, stop error) {
						sd.hook(stage, name, func(context.Context) error {
							if name == c.failAt {
								return boom
							}
							return nil
						}, func(context.Context) error { return stop })
					}
					// registered in a start order: the stop order must
					// come from the stages, not from this
					step(stopClients, "redis", nil)
					step(stopProducer, "kafka", nil)
					step(stopWork, "checker", stopErr)
					step(stopListeners, "http", nil)
				}))
			err := a.Start(context.Background())
			if !errors.Is(err, c.startErr) || (err == nil) != (c.startErr == nil) {
				t.Fatalf("start: %v, want %v", err, c.startErr)
			}
			if err == nil {
				err = a.Stop(context.Background())
				if !errors.Is(err, c.stopErr) || (err == nil) != (c.stopErr == nil) {
					t.Fatalf("stop: %v, want %v", err, c.stopErr)
				}
			}
			if got := log.get(); !slices.Equal(got, c.want) {
				t.Fatalf("stopped %v, want %v", got, c.want)
			}
		})
	}
}

// TestShutdownOrderDrain is TestShutdownOrder for the drain process
// (against the real Redis and Kafka): its drain and consumer stop with
// the listeners, then its checker makes its last flush, then the
// dead-letter writer and the producer close, then Redis.
func TestShutdownOrderDrain(t *testing.T) {
	app := realApp(t)
	var sd *shutdown
	var srv *httpapi.Server
	a := fxtest.New(t, drainModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&sd, &srv),
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }))
	a.RequireStart()
	var log stopLog
	sd.observe = log.observe
	a.RequireStop()
	want := []string{"listeners/http", "listeners/drain", "listeners/kafka " + app.Kafka.DeferredTopic + " consumer",
		"work/checker",
		"producer/kafka " + deadLetterTopic(app), "producer/kafka",
		"clients/redis"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("stop order:\n got %s\nwant %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
}
