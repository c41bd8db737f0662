package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.uber.org/dig"
)

// A process that fails to start says why on one line, the cause first:
//
//	velvetrope dev: rules: nope.yaml: no such file or directory
//
// "dev" is the process, "rules" the stage that failed (config, rules,
// redis, kafka, clickhouse, checker, http, grpc, pprof, ...). Each stage
// tags its errors with stageError where it builds or starts something;
// runProcess finds the tag through fx's and dig's wrapping with errors.As,
// so none of fx's text ("could not build arguments for function ...")
// reaches the operator unless they ask with --debug. A cause that lists
// several problems (a rule file's errors, a config file's) gives one line
// each, every line with the same prefix.

// stageError is an error of one stage of a process's start.
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string {
	msg := e.err.Error()
	if strings.HasPrefix(msg, e.stage+": ") { // the library already said it
		return msg
	}
	return e.stage + ": " + msg
}

func (e *stageError) Unwrap() error { return e.err }

// staged tags err (nil stays nil) with the stage it failed in.
func staged(stage string, err error) error {
	if err == nil {
		return nil
	}
	var se *stageError
	if errors.As(err, &se) && se.stage == stage {
		return err
	}
	return &stageError{stage, err}
}

// startTrace is the stage whose start hook runs, for a start that times
// out: fx then returns only the context's error. It travels in the start
// context, so a graph started without one (fxtest) records nothing.
type startTrace struct {
	timeout time.Duration // the start's
	mu      sync.Mutex
	stage   string
}

type startTraceKey struct{}

func (t *startTrace) set(stage string) {
	t.mu.Lock()
	t.stage = stage
	t.mu.Unlock()
}

func (t *startTrace) get() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stage
}

// stagedStart wraps a start hook: its error is tagged with stage, and
// stage is recorded as running while it runs.
func stagedStart(stage string, start func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if t, ok := ctx.Value(startTraceKey{}).(*startTrace); ok {
			t.set(stage)
		}
		return staged(stage, start(ctx))
	}
}

// startFailure is what a failed start prints: one line per problem, each
// "velvetrope NAME: STAGE: cause". An error no stage tagged is reduced to
// its root cause (dig.RootCause: the first error that is not fx's or
// dig's own wrapping) under the stage "start"; a start that ran out of
// time names the stage whose hook was running.
func startFailure(name string, err error, trace *startTrace) []string {
	stage, cause := "start", dig.RootCause(err)
	var se *stageError
	switch {
	case errors.As(err, &se):
		stage, cause = se.stage, se.err
	case errors.Is(err, context.DeadlineExceeded) && trace != nil && trace.get() != "":
		stage, cause = trace.get(), fmt.Errorf("start timed out after %v", trace.timeout)
	}
	prefix, text := "velvetrope "+name+": ", cause.Error()
	if !strings.HasPrefix(text, stage+": ") { // the library said it already
		prefix += stage + ": "
	}
	// a cause that lists several problems: one line each, each with the stage
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, prefix+l)
		}
	}
	return lines
}

// printStartFailure writes err as startFailure says. (With --debug, fx's
// event log, on stderr before it, has fx's whole text of the error.)
func printStartFailure(w io.Writer, name string, err error, trace *startTrace) {
	for _, l := range startFailure(name, err, trace) {
		fmt.Fprintln(w, l)
	}
}

// heldLog holds a process's log lines until its start has succeeded (then
// they are written out, and what follows passes through) or failed (then
// they are dropped: the cause says what went wrong, --debug shows all).
// A start still going after logHoldMax is released anyway (holdLogs): an
// operator watching a slow start (Kafka unreachable, retried) must see why
// it waits, not a silent process.
// Safe for concurrent use: background loops log while the process starts.
type heldLog struct {
	mu   sync.Mutex
	w    io.Writer
	held *bytes.Buffer // nil once released
}

func newHeldLog(w io.Writer) *heldLog { return &heldLog{w: w, held: &bytes.Buffer{}} }

// logHoldMax is how long a start's log lines are held at most: quick
// failures (a missing file, a taken port) stay one line.
const logHoldMax = 2 * time.Second

// holdLogs is a heldLog released by itself after d; stop cancels that.
func holdLogs(w io.Writer, d time.Duration) (h *heldLog, stop func() bool) {
	h = newHeldLog(w)
	return h, time.AfterFunc(d, h.release).Stop
}

func (h *heldLog) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil {
		return h.held.Write(p)
	}
	return h.w.Write(p)
}

// release writes what was held and lets later lines through.
func (h *heldLog) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil {
		h.w.Write(h.held.Bytes())
		h.held = nil
	}
}
