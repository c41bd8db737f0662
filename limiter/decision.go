package limiter

import (
	"errors"
	"fmt"
	"time"
)

// Never is the RetryAfter of a refusal that waiting cannot cure: the cost is
// above what the parameters ever admit, or the bucket never refills. It is
// negative on purpose so that it can never be mistaken for a long wait; test
// for it with [Decision.RetryNever].
const Never time.Duration = -1

// Decision is the outcome of one AllowAt call.
type Decision struct {
	// Allowed reports whether the cost was admitted (and charged).
	Allowed bool
	// Limit is the capacity (token and leaky bucket), burst (GCRA) or
	// per-window limit, in token units.
	Limit int64
	// Remaining is what a further request could still take now, after this
	// decision; never negative.
	Remaining int64
	// ResetAfter is how long until the state is back to fresh (full bucket,
	// empty window), rounded up.
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed; otherwise how long until the same cost
	// would be admitted if nothing else arrives (rounded up), or [Never].
	RetryAfter time.Duration
}

// RetryNever reports whether waiting cannot make this request admissible.
func (d Decision) RetryNever() bool { return d.RetryAfter == Never }

// ErrNegativeCost is returned for a cost below zero.
var ErrNegativeCost = errors.New("limiter: negative cost")

// ErrCostExceedsLimit matches (with errors.Is) every [CostError].
var ErrCostExceedsLimit = errors.New("limiter: cost exceeds what the limit can ever admit")

// ErrInvalidParams matches (with errors.Is) every [ParamError].
var ErrInvalidParams = errors.New("limiter: invalid parameters")

// CostError reports a cost that the algorithm's parameters can never admit,
// so that callers answer "never" instead of waiting forever.
type CostError struct {
	Cost, Limit int64
}

func (e *CostError) Error() string {
	return fmt.Sprintf("limiter: cost %d exceeds limit %d and can never be admitted", e.Cost, e.Limit)
}

// Is makes errors.Is(err, ErrCostExceedsLimit) true.
func (e *CostError) Is(target error) bool { return target == ErrCostExceedsLimit }

// ParamError reports an invalid algorithm parameter by field name.
type ParamError struct {
	Algorithm, Field, Reason string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("limiter: %s: %s %s", e.Algorithm, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidParams) true.
func (e *ParamError) Is(target error) bool { return target == ErrInvalidParams }

// MaxTime is the latest time AllowAt accepts (Unix nanoseconds, 2^62: the
// year 2116). Times are checked against [0, MaxTime] so that a state plus
// the longest span (100 years) can never overflow int64.
const MaxTime = int64(1) << 62

// ErrTimeRange is returned for a time outside [0, MaxTime].
var ErrTimeRange = errors.New("limiter: time outside [0, MaxTime]")

// checkCost validates now and cost against limit, filling d with the
// refusal to give when the request can never fit.
func checkCost(now, cost, limit int64, d *Decision) error {
	d.Limit = limit
	if uint64(now) > uint64(MaxTime) {
		d.RetryAfter = Never
		return ErrTimeRange
	}
	if cost < 0 {
		d.RetryAfter = Never
		return ErrNegativeCost
	}
	if cost > limit {
		d.RetryAfter = Never
		return &CostError{Cost: cost, Limit: limit}
	}
	return nil
}

func dur(ns int64) time.Duration { return time.Duration(ns) }
