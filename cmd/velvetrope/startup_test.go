package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
)

// TestStartFailureLines: what startFailure makes of the errors fx returns,
// from a real fx graph (a constructor's error reaches it through dig's
// wrapping).
func TestStartFailureLines(t *testing.T) {
	type dep struct{}
	build := func(err error) error {
		app := fx.New(fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
			fx.Provide(func() (*dep, error) { return nil, err }), fx.Invoke(func(*dep) {}))
		return app.Err()
	}
	cases := []struct {
		name string
		err  error
		want []string
	}{
		{"a staged constructor", build(staged("redis", errors.New("no address"))), []string{"velvetrope p: redis: no address"}},
		{"the library named the stage already", build(staged("http", errors.New("http: listen tcp :1: bind: permission denied"))),
			[]string{"velvetrope p: http: listen tcp :1: bind: permission denied"}},
		{"a list of problems: one line each", build(staged("rules", errors.New("a.yaml:1:1: x\nb.yaml:2:1: y\n"))),
			[]string{"velvetrope p: rules: a.yaml:1:1: x", "velvetrope p: rules: b.yaml:2:1: y"}},
		{"staged twice", build(staged("kafka", staged("kafka", errors.New("no broker")))), []string{"velvetrope p: kafka: no broker"}},
		{"untagged: the root cause, under start", build(errors.New("boom")), []string{"velvetrope p: start: boom"}},
	}
	for i, c := range cases {
		if got := startFailure("p", c.err, nil); !slices.Equal(got, c.want) {
			t.Fatalf("step %d (%s): got %q, want %q", i, c.name, got, c.want)
		}
	}
}

// TestStartTimeoutNamesTheStage: when the start runs out of time fx
// returns only the context's error; the stage whose hook was running is
// named. synctest: the deadline passes without waiting.
func TestStartTimeoutNamesTheStage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := fx.New(fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
			fx.Invoke(func(lc fx.Lifecycle) {
				lc.Append(fx.Hook{OnStart: stagedStart("redis", func(context.Context) error { return nil })})
				lc.Append(fx.Hook{OnStart: stagedStart("kafka", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })})
			}))
		trace := &startTrace{timeout: 5 * time.Second}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), startTraceKey{}, trace), trace.timeout)
		defer cancel()
		err := app.Start(ctx)
		want := []string{"velvetrope aggregator: kafka: start timed out after 5s"}
		if got := startFailure("aggregator", err, trace); !slices.Equal(got, want) {
			t.Fatalf("got %q (from %v), want %q", got, err, want)
		}
	})
}

// TestHeldLog: lines are held until release, then written in order, and
// later lines pass through.
func TestHeldLog(t *testing.T) {
	var out bytes.Buffer
	h := newHeldLog(&out)
	h.Write([]byte("one\n"))
	h.Write([]byte("two\n"))
	if out.Len() != 0 {
		t.Fatalf("written before release: %q", out.String())
	}
	h.release()
	h.Write([]byte("three\n"))
	if out.String() != "one\ntwo\nthree\n" {
		t.Fatalf("got %q", out.String())
	}
}

// TestHeldLogReleasedBySlowStart: a start still going after logHoldMax
// shows what it logged (why it waits) and passes later lines through; one
// that ends sooner and stops the timer shows nothing. synctest: the hold
// elapses without waiting.
func TestHeldLogReleasedBySlowStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		h, _ := holdLogs(&out, logHoldMax)
		h.Write([]byte("kafka not reachable at start\n"))
		time.Sleep(logHoldMax - time.Millisecond)
		synctest.Wait()
		if out.Len() != 0 {
			t.Fatalf("released before logHoldMax: %q", out.String())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		h.Write([]byte("still waiting\n"))
		if out.String() != "kafka not reachable at start\nstill waiting\n" {
			t.Fatalf("after logHoldMax: %q", out.String())
		}

		var quick lockedBuffer
		h2, stop := holdLogs(&quick, logHoldMax)
		h2.Write([]byte("rules loaded\n"))
		stop() // the start failed at once
		time.Sleep(2 * logHoldMax)
		synctest.Wait()
		if quick.Len() != 0 {
			t.Fatalf("a stopped hold released: %q", quick.String())
		}
	})
}

// lockedBuffer is a bytes.Buffer the release timer's goroutine writes
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) Len() int { return len(l.String()) }
