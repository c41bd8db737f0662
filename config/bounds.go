package config

import (
	"fmt"
	"math"
	"math/bits"
)

// Bounds on the numbers a limit is multiplied by, and on the limits
// themselves. This file is their one home: the rule-file parser checks
// rule files against them, and the checker checks what an operator sends
// (a control's limit, a pool's capacity) against the same functions, so a
// value one surface refuses the other refuses too.
const (
	// MaxOveragePercent bounds a soft throttle's overage_percent: a soft
	// rule admits up to limit × (1 + overage_percent/100).
	MaxOveragePercent = 1000
	// MinMaxMultiplier and MaxMaxMultiplier bound an elastic throttle's
	// max_multiplier: an elastic rule admits up to limit × max_multiplier.
	MinMaxMultiplier = 2
	MaxMaxMultiplier = 100
	// DefaultMaxMultiplier is an elastic throttle's max_multiplier when
	// the file gives none.
	DefaultMaxMultiplier = 2
)

// MaxRequestsPerUnit is the largest requests_per_unit a rule of throttle
// type t holds: every ceiling derived from it (the soft ceiling limit +
// limit × overage_percent / 100, the elastic ceiling limit ×
// max_multiplier) fits in an int64 for any overage or multiplier the
// type allows. The bound is the type's, not one rule's own overage or
// multiplier, so a limit valid for one rule of a type is valid for every
// rule of it, and editing the multiplier never makes a limit overflow.
func MaxRequestsPerUnit(t ThrottleType) int64 {
	switch t {
	case ThrottleSoft:
		// limit + ceil(limit × 1000 / 100) = 11 × limit, and limit × 1000
		// computed on the way
		return math.MaxInt64 / (MaxOveragePercent + 100)
	case ThrottleElastic:
		return math.MaxInt64 / MaxMaxMultiplier
	}
	return math.MaxInt64 // a hard limit is only compared: any int64 holds
}

// CheckRequestsPerUnit returns an error when n is not a limit a rule of
// throttle type t can hold: negative, or above MaxRequestsPerUnit(t).
// The message names no field: callers prefix theirs (requests_per_unit in
// a rule file, limit in a control).
func CheckRequestsPerUnit(t ThrottleType, n int64) error {
	switch max := MaxRequestsPerUnit(t); {
	case n < 0:
		return fmt.Errorf("must not be negative, got %d", n)
	case n > max:
		return fmt.Errorf("at most %d under a %s throttle (its ceiling must fit in 64 bits), got %d", max, throttleName(t), n)
	}
	return nil
}

// CheckPoolCapacity returns an error when n is not a pool's capacity: a
// pool is a capacity elastic rules borrow from, at least 1, and at most
// what a hard limit holds (a pool's rule is a hard fixed window).
func CheckPoolCapacity(n int64) error {
	if n < 1 {
		return fmt.Errorf("want at least 1, got %d", n)
	}
	return CheckRequestsPerUnit(ThrottleHard, n)
}

// CheckLimit returns an error when r.WithLimit(limit) cannot be computed
// without overflow: limit out of CheckRequestsPerUnit for r's throttle,
// or a burst that WithLimit scales to the new limit (burst × limit / the
// rule's limit) whose product does not fit in 64 bits. An operator's
// limit override is checked with it before the rule is derived.
func (r *Rule) CheckLimit(limit int64) error {
	t := r.Throttle.Type
	if t == "" {
		t = ThrottleHard
	}
	if err := CheckRequestsPerUnit(t, limit); err != nil {
		return err
	}
	if r.Burst > 0 && limit > 0 {
		if hi, lo := bits.Mul64(uint64(r.Burst), uint64(limit)); hi != 0 || lo > math.MaxInt64 {
			return fmt.Errorf("at most %d for rule %s (its burst %d is scaled by the new limit and must fit in 64 bits), got %d",
				math.MaxInt64/r.Burst, r.ID, r.Burst, limit)
		}
	}
	return nil
}

func throttleName(t ThrottleType) string {
	if t == "" {
		return string(ThrottleHard)
	}
	return string(t)
}
