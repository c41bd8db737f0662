// Package logx rate-limits log lines that a request can trigger, so a
// flood of bad or failing requests cannot flood the log: at most one line
// per interval, carrying how many were suppressed since the last one.
package logx

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Limited logs through Logger at most once per Every.
type Limited struct {
	Logger     *slog.Logger
	Every      time.Duration
	now        func() time.Time // tests
	last       atomic.Int64     // unix nanos of the last line
	suppressed atomic.Uint64
}

// New returns a Limited logger; a nil logger is slog.Default().
func New(logger *slog.Logger, every time.Duration) *Limited {
	if logger == nil {
		logger = slog.Default()
	}
	return &Limited{Logger: logger, Every: every, now: time.Now}
}

// Warn logs msg with args unless a line went out less than Every ago; it
// reports whether it logged.
func (l *Limited) Warn(msg string, args ...any) bool {
	now := l.now().UnixNano()
	last := l.last.Load()
	if now-last < int64(l.Every) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return false
	}
	if n := l.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed_since_last", n)
	}
	l.Logger.Warn(msg, args...)
	return true
}
