// Package breaker is a lock-free circuit breaker: after a number of
// consecutive failures it opens for a while, refusing calls without
// making them, then lets one call probe at a time.
package breaker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Breaker opens after threshold consecutive failures, for openFor: while
// open, Allow refuses every call (no waiting on a dead dependency); then
// one call at a time probes (half-open) and the first success closes it.
// Times are unix nanoseconds passed in (tests inject them). Lock-free;
// safe for concurrent use.
type Breaker struct {
	threshold int64
	openFor   int64 // ns

	failures  atomic.Int64
	openUntil atomic.Int64 // unix ns; 0 while closed
	probing   atomic.Bool

	// Opens counts closed → open transitions; Rejected calls failed fast.
	Opens, Rejected atomic.Uint64
}

// ErrOpen is what a call refused by an open breaker reports.
var ErrOpen = errors.New("circuit breaker open")

// New returns a closed Breaker.
func New(threshold int64, openFor time.Duration) *Breaker {
	return &Breaker{threshold: max(threshold, 1), openFor: int64(openFor)}
}

// State is the breaker's state for metrics: 0 closed, 1 half-open
// (probing), 2 open.
type State int

// States.
const (
	Closed State = iota
	HalfOpen
	Open
)

func (s State) String() string {
	return [...]string{"closed", "half-open", "open"}[s]
}

// Allow reports whether a call may go out at now, and whether it is the
// half-open probe, whose outcome (Done) decides the state.
func (b *Breaker) Allow(now int64) (ok, probe bool) {
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

// Done records the outcome of a call Allow let through. A canceled
// context is the caller's doing and says nothing about the dependency.
func (b *Breaker) Done(now int64, err error, probe bool) {
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

// State reports the state at now.
func (b *Breaker) State(now int64) State {
	until := b.openUntil.Load()
	switch {
	case until == 0:
		return Closed
	case now < until && !b.probing.Load():
		return Open
	}
	return HalfOpen
}
