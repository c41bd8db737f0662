package checker

import (
	"context"
	"errors"
	"sync/atomic"
)

// breaker is a circuit breaker in front of the counter store: after
// Threshold consecutive failures it opens for OpenFor, and while open
// every store call fails at once with counters.ErrStoreUnavailable (no waiting per
// request on a dead Redis); then one call at a time probes (half-open)
// and the first success closes it. Lock-free; safe for concurrent use.
type breaker struct {
	threshold int64
	openFor   int64 // ns

	failures  atomic.Int64
	openUntil atomic.Int64 // unix ns; 0 while closed
	probing   atomic.Bool

	// Opens counts closed → open transitions; Rejected calls failed fast.
	Opens, Rejected atomic.Uint64
}

// errBreakerOpen is what a call refused by an open breaker returns.
var errBreakerOpen = errors.New("circuit breaker open")

// BreakerState is the breaker's state for metrics: 0 closed, 1 half-open
// (probing), 2 open.
type BreakerState int

// Breaker states.
const (
	BreakerClosed BreakerState = iota
	BreakerHalfOpen
	BreakerOpen
)

func (s BreakerState) String() string {
	return [...]string{"closed", "half-open", "open"}[s]
}

// allow reports whether a store call may go out now, and whether it is the
// half-open probe (whose outcome decides the state).
func (b *breaker) allow(now int64) (ok, probe bool) {
	until := b.openUntil.Load()
	switch {
	case until == 0:
		return true, false
	case now < until:
		b.Rejected.Add(1)
		return false, false
	case b.probing.CompareAndSwap(false, true):
		return true, true
	}
	b.Rejected.Add(1)
	return false, false
}

// done records the outcome of a call allow let through. Errors the caller
// caused (its context canceled) say nothing about the store.
func (b *breaker) done(now int64, err error, probe bool) {
	if err != nil && errors.Is(err, context.Canceled) {
		if probe {
			b.probing.Store(false)
		}
		return
	}
	if err == nil {
		b.failures.Store(0)
		if probe {
			b.openUntil.Store(0)
			b.probing.Store(false)
		}
		return
	}
	if probe {
		b.openUntil.Store(now + b.openFor)
		b.probing.Store(false)
		return
	}
	if b.failures.Add(1) >= b.threshold && b.openUntil.CompareAndSwap(0, now+b.openFor) {
		b.Opens.Add(1)
	}
}

// state reports the state at now.
func (b *breaker) state(now int64) BreakerState {
	until := b.openUntil.Load()
	switch {
	case until == 0:
		return BreakerClosed
	case now < until && !b.probing.Load():
		return BreakerOpen
	}
	return BreakerHalfOpen
}
