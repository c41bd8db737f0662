package checker

import (
	"context"
	"errors"
)

// Kind is how a rule's shared counter is kept.
type Kind uint8

// Counter kinds.
const (
	// KindWindow: a count per window start (Envoy's fixed window,
	// fixed_window, sliding_window).
	KindWindow Kind = iota + 1
	// KindTAT: a theoretical arrival time (token_bucket, gcra, leaky_bucket).
	KindTAT
)

// ReadItem asks for the applied state of one counter: a window's count, or
// a bucket's TAT. Read fills the results.
type ReadItem struct {
	Key    string // counter key (rule id and request values)
	Kind   Kind
	Window int64 // KindWindow: window start, unix ns

	// Results.
	Found bool
	// Total: KindWindow, the global count applied in the window; KindTAT,
	// the theoretical arrival time (unix ns).
	Total int64
	// Cum: KindTAT only, the cumulative hits applied by all instances.
	Cum int64
	// Own: the part of Cum (KindTAT) or Total (KindWindow) that this
	// instance's consumption contributed: OwnMem (hits decided in memory,
	// applied from deltas or folded in by charges, a high-water mark of the
	// instance's counted total) plus OwnSync (hits the store charged).
	Own, OwnMem, OwnSync int64
	// Instances: how many instances have applied consumption to the
	// counter (for the local_budget failure policy).
	Instances int
	// Base: this instance's part (OwnMem + OwnSync) when the counter was
	// last reset; Own excludes it. Gen counts a bucket's resets, so a
	// checker knows to forget its own view of the bucket.
	Base, Gen int64
}

// ChargeRequest is one atomic check-and-charge of a shared counter, made
// near the limit (and for every decision of a `mode: sync` rule). The store
// counts the caller's unapplied consumption (OwnEmitted minus what it has
// applied for the instance) before deciding.
type ChargeRequest struct {
	Key      string
	Kind     Kind
	Instance string
	Now      int64 // unix ns
	Cost     int64

	// KindWindow: the window start and length, the ceiling, and the
	// instance's hits decided in memory in this window (and in the previous
	// one: sliding window) — the store folds what it has not applied yet.
	Window      int64
	WindowNanos int64
	Ceiling     int64
	OwnEmitted  int64
	Sliding     bool
	PrevEmitted int64
	// OtherShards (PrevOtherShards): a hot key spread over shards (`shards:
	// N`) is charged in this instance's shard only; these are the other
	// shards' totals as last read, counted in the check.
	OtherShards, PrevOtherShards int64
	// ChargeDenied charges the cost even when refused (Envoy semantics).
	ChargeDenied bool

	// KindTAT: burst, rate (RateTokens per WindowNanos), the instance's
	// cumulative counted hits and its own exact view of the TAT.
	Burst      int64
	RateTokens int64
	OwnCum     int64
	LocalTAT   int64
}

// ChargeResult is the store's answer, with the counter's state after it.
type ChargeResult struct {
	Allowed bool
	Total   int64 // as in ReadItem
	Cum     int64
	Own     int64 // OwnMem + OwnSync, as in ReadItem
	OwnMem  int64
	OwnSync int64
	// PrevTotal, PrevOwn: the previous window (sliding window only).
	PrevTotal, PrevOwn int64
	Instances          int
	// Base, PrevBase, Gen: as in ReadItem (PrevBase: the previous window).
	Base, PrevBase, Gen int64
}

// CounterStore is the shared counter store as the checker sees it: batch
// reads of applied state (refresh) and atomic charges. The in-memory
// [MemStore] and the Redis store implement it with the same semantics.
type CounterStore interface {
	// Read fills items with the applied state of their counters; Own is
	// the part of instance.
	Read(ctx context.Context, instance string, items []ReadItem) error
	Charge(ctx context.Context, req *ChargeRequest) (ChargeResult, error)
	// Refund takes back an allowed charge of a request that another
	// descriptor then refused (a refused request charges nothing).
	Refund(ctx context.Context, req *ChargeRequest) error
	// SyncStore runs `mode: sync` decisions: the rule's algorithm, atomic
	// in the store, on the store's clock.
	SyncStore
}

// ErrStoreUnavailable marks store errors the failure policy applies to.
var ErrStoreUnavailable = errors.New("checker: counter store unavailable")

// ResetItem is one counter state to forget: a window's count (one shard's
// key of it), or a bucket's debt.
type ResetItem struct {
	Key    string
	Kind   Kind
	Window int64 // KindWindow: window start, unix ns
}

// Resetter forgets counters on an operator's request. A reset zeroes the
// count (or empties the bucket) and records each instance's part at that
// moment as its base, so consumption still in flight adds only what it
// adds, and every checker learns the reset from its next read. The
// counter stores implement it.
type Resetter interface {
	Reset(ctx context.Context, items []ResetItem) error
	// ResetSync forgets a `mode: sync` counter (every window it keeps).
	ResetSync(ctx context.Context, q *SyncRequest) error
}
