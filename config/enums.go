package config

import (
	"slices"
	"time"

	"github.com/velvetrope/velvetrope/limiter"
)

// Algorithm is a rule's limiting algorithm, as written in rule files. The
// zero value is Envoy's semantics: a fixed window aligned to the unit that
// charges every call, also refused ones.
type Algorithm string

// Algorithms.
const (
	AlgEnvoy         Algorithm = ""
	AlgFixedWindow   Algorithm = "fixed_window"
	AlgSlidingWindow Algorithm = "sliding_window"
	AlgTokenBucket   Algorithm = "token_bucket"
	AlgGCRA          Algorithm = "gcra"
	AlgLeakyBucket   Algorithm = "leaky_bucket"
	AlgSlidingLog    Algorithm = "sliding_log"
)

// Algorithms lists every algorithm a rule may run, Envoy's semantics
// (AlgEnvoy, written as no algorithm) first and a concurrency block's
// (AlgConcurrency, written as `concurrency:`) last: the one list the rule
// parser accepts and the delta validator knows (package events), so that
// no algorithm a rule can run makes deltas the pipeline refuses.
func Algorithms() []Algorithm {
	return []Algorithm{AlgEnvoy, AlgFixedWindow, AlgSlidingWindow, AlgTokenBucket, AlgGCRA, AlgLeakyBucket, AlgSlidingLog, AlgConcurrency}
}

// Known reports whether a is one of [Algorithms].
func (a Algorithm) Known() bool { return slices.Contains(Algorithms(), a) }

// Bucket reports whether the algorithm keeps a bucket (a theoretical
// arrival time) rather than window counts.
func (a Algorithm) Bucket() bool {
	return a == AlgTokenBucket || a == AlgGCRA || a == AlgLeakyBucket
}

// Limiter is the exact in-process algorithm a runs with: limit is the
// window's ceiling or the bucket's capacity, tokens the bucket's refill
// per window. The one mapping from rule algorithms to the limiter package,
// used by the rules and by the in-memory store's `mode: sync`; nil for an
// unknown algorithm.
func (a Algorithm) Limiter(limit, tokens int64, window time.Duration) limiter.Algorithm {
	rate := limiter.Rate{Tokens: tokens, Period: window}
	switch a {
	case AlgEnvoy:
		return limiter.FixedWindow{Limit: limit, Window: window, ChargeDenied: true}
	case AlgFixedWindow:
		return limiter.FixedWindow{Limit: limit, Window: window}
	case AlgSlidingWindow:
		return limiter.SlidingWindow{Limit: limit, Window: window}
	case AlgSlidingLog:
		return limiter.SlidingLog{Limit: limit, Window: window}
	case AlgTokenBucket:
		return limiter.TokenBucket{Capacity: limit, Refill: rate}
	case AlgGCRA:
		return limiter.GCRA{Burst: limit, Rate: rate}
	case AlgLeakyBucket:
		return limiter.LeakyBucket{Capacity: limit, Leak: rate}
	}
	return nil
}

// Mode is where a rule's counters live.
type Mode string

// Modes: async (memory, shared through Kafka and the store; the default),
// sync (one atomic store call per decision), local (this process only).
const (
	ModeAsync Mode = "async"
	ModeSync  Mode = "sync"
	ModeLocal Mode = "local"
)

// NearLimit is what an async rule does near its limit.
type NearLimit string

// Near-limit behaviours: sync (one atomic store charge per decision; the
// default) or async (memory only).
const (
	NearSync  NearLimit = "sync"
	NearAsync NearLimit = "async"
)

// ThrottleType is how a rule treats traffic over its limit.
type ThrottleType string

// Throttle types.
const (
	ThrottleHard    ThrottleType = "hard"
	ThrottleSoft    ThrottleType = "soft"
	ThrottleElastic ThrottleType = "elastic"
)

// FailurePolicy decides when the counter store is needed and does not
// answer.
type FailurePolicy string

// Failure policies: open admits (and counts for later), closed refuses,
// local_budget admits up to this instance's share of what remained.
const (
	FailOpen        FailurePolicy = "open"
	FailClosed      FailurePolicy = "closed"
	FailLocalBudget FailurePolicy = "local_budget"
)

// OnExceed is what a request over the limit gets.
type OnExceed string

// Over-limit actions: deny (429) or defer (the deferred queue).
const (
	ExceedDeny  OnExceed = "deny"
	ExceedDefer OnExceed = "defer"
)
