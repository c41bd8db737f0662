package counters

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
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
	// Allowance is every instance's first-touch allowance in this window
	// (0: none); Others the live instances it reserves for: those beside
	// the caller's, and its own when Mark is not set (an evicted entry's
	// memory hits may be in flight, unknown to the caller). The check
	// reserves, for each of them that has not charged in the window, the
	// allowance less what the window holds of its memory hits: hits it
	// may have admitted without a store call (docs/design.md, "First
	// touch"). Mark: the caller holds all its instance's memory hits of
	// the window (its entry's first life there), so the charge marks the
	// instance as charged here, which ends the reservation for it.
	Allowance int64
	Others    []string
	Mark      bool

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
	// Reserved: what the check reserved for the others' allowances in the
	// current window (KindWindow).
	Reserved int64
	// Base, PrevBase, Gen: as in ReadItem (PrevBase: the previous window).
	Base, PrevBase, Gen int64
}

// Refunded makes r describe its counter after q's charge was refunded
// (Store.Refund): the answer counted the charge in.
func (r *ChargeResult) Refunded(q *ChargeRequest) {
	r.Own -= q.Cost
	r.OwnSync -= q.Cost
	r.Cum -= q.Cost
	if q.Kind == KindWindow {
		r.Total -= q.Cost
	} else {
		r.Total -= Span(q.Cost, q.WindowNanos, q.RateTokens)
	}
}

// Store is the shared counter store as the checker sees it: batch
// reads of applied state (refresh) and atomic charges. The in-memory
// [MemStore] and the Redis store implement it with the same semantics.
type Store interface {
	// Read fills items with the applied state of their counters; Own is
	// the part of instance.
	Read(ctx context.Context, instance string, items []ReadItem) error
	Charge(ctx context.Context, req *ChargeRequest) (ChargeResult, error)
	// Refund takes back an allowed charge of a request that another
	// descriptor then refused (a refused request charges nothing).
	Refund(ctx context.Context, req *ChargeRequest) error
	// Do runs a batch of charges and sync decisions in one round trip,
	// each as atomic as Charge or ChargeSync alone, and fills each
	// operation's answer or Err (store failures wrap ErrStoreUnavailable).
	Do(ctx context.Context, ops []*Op)
	// SyncStore runs `mode: sync` decisions: the rule's algorithm, atomic
	// in the store, on the store's clock.
	SyncStore
	// Registry lists the live checkers and tells the store's time.
	Registry
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

// SyncRequest is one exact decision made inside the counter store, for a
// `mode: sync` rule: the store runs the rule's algorithm atomically, on its
// own clock.
type SyncRequest struct {
	Key       string // counter key
	Algorithm config.Algorithm
	Limit     int64 // per window (windows, log), or the bucket capacity (buckets)
	Window    int64 // window length, or the rate's period (ns)
	Tokens    int64 // buckets: tokens per Window
	Cost      int64
	// RequestID, when set, makes the decision idempotent for IdempotencyTTL:
	// a retry gets the stored answer and is not charged again.
	RequestID      string
	IdempotencyTTL time.Duration
	// Now pins the store's clock (unix ns) for conformance tests; 0 means
	// the store's own time (Redis TIME), always in production.
	Now int64
	// Clock is the caller's clock (unix ns), kept within max_clock_skew of
	// the store's: a fixed or Envoy window decided with plain commands is
	// the window it names (0: the store's scripts decide).
	Clock int64
	// Force counts Cost whatever the counter holds (a cost charged after
	// the response): never refused, it may take the counter past its
	// limit (limiter.Force), and is answered allowed with what remains.
	Force bool
	// Rule is the counter's rule id, and Lease the lease an acquire of a
	// concurrency rule adds (config.AlgConcurrency; leases.go): Limit is
	// then the leases in flight, Window their TTL, and the answer's Token
	// the lease held.
	Rule, Lease string
}

// IdempotencyKey is what a store remembers the answer under: the request
// id bound to the counter (the store's key) and the cost, so that another
// checker that has not seen the id never replays an answer given to a
// different request. Empty without a request id.
func (q *SyncRequest) IdempotencyKey() string {
	if q.RequestID == "" {
		return ""
	}
	if q.Force { // a charge and a decision under one id are two things
		return q.RequestID + "#f" + strconv.FormatInt(q.Cost, 10)
	}
	return q.RequestID + "#" + strconv.FormatInt(q.Cost, 10)
}

// SyncResult is the store's decision. Token identifies what was charged,
// for a refund.
type SyncResult struct {
	Allowed    bool
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration // limiter.Never when waiting cannot help
	Token      string
}

// SyncStore is the part of a [Store] that runs `mode: sync`
// decisions.
type SyncStore interface {
	ChargeSync(ctx context.Context, q *SyncRequest) (SyncResult, error)
	RefundSync(ctx context.Context, q *SyncRequest, token string) error
}

// syncAlgorithm is the limiter algorithm a sync request stands for: the
// in-memory store runs exactly it, and the Redis scripts must agree.
func syncAlgorithm(q *SyncRequest) (limiter.Algorithm, error) {
	if alg := q.Algorithm.Limiter(q.Limit, q.Tokens, time.Duration(q.Window)); alg != nil {
		return alg, nil
	}
	return nil, fmt.Errorf("checker: sync: unknown algorithm %q", q.Algorithm)
}

// SyncRequestFor builds the sync request of rule r for cost.
func SyncRequestFor(r *config.Rule, key string, cost int64) SyncRequest {
	q := SyncRequest{Key: key, Algorithm: r.Algorithm, Limit: r.Capacity(), Window: int64(r.Window), Cost: cost, Rule: r.ID}
	if r.Algorithm.Bucket() {
		q.Tokens = r.Limit
	}
	return q
}

// Control actions. An operator's control applies to one descriptor of one
// domain (its exact entries) on every checker that shares the control
// store.
const (
	// ActionAllow exempts the descriptor: it is admitted and counted
	// nowhere (an allow-list entry, or a temporary exemption).
	ActionAllow = "allow"
	// ActionDeny refuses the descriptor whatever its counter says (a
	// deny-list entry), also under a shadow_mode rule.
	ActionDeny = "deny"
	// ActionLimit replaces the matched rule's limit for this descriptor
	// (same algorithm, mode and counter: the count so far still applies).
	ActionLimit = "limit"
	// ActionPool sets the capacity (Limit) of the pool named by the one
	// entry {"#pool": name} of Domain, until deleted: what an autoscaler
	// or a health signal sets at run time (PUT /v1/pools/...).
	ActionPool = "pool"
)

// Control is one operator control as stored and listed. Values of entries
// the matched rule hashes (hash_values) are stored hashed: a control never
// carries a value the rules keep private.
type Control struct {
	ID      string         `json:"id"` // derived from domain and entries: one control per descriptor
	Domain  string         `json:"domain"`
	Entries []config.Entry `json:"entries"`
	Action  string         `json:"action"`
	Limit   int64          `json:"limit,omitempty"` // ActionLimit only
	// Rule is the id of the rule the descriptor matched when the control
	// was set (empty: none); a limit applies to that rule only.
	Rule      string `json:"rule,omitempty"`
	Reason    string `json:"reason,omitempty"`
	CreatedAt int64  `json:"created_unix_nanos"`
	ExpiresAt int64  `json:"expires_unix_nanos,omitempty"` // 0: until deleted
}

// Live reports whether c applies at now.
func (c *Control) Live(now int64) bool { return c.ExpiresAt == 0 || now < c.ExpiresAt }

// ControlID is the id of the control of one descriptor: 128 bits of
// SHA-256 over the domain and entries, each length-prefixed, so distinct
// descriptors get distinct ids (no separator a value carries can make two
// encodings equal, and no practical search finds two that hash alike).
func ControlID(domain string, entries []config.Entry) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	part := func(s string) {
		_, _ = h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		_, _ = h.Write([]byte(s))
	}
	part(domain)
	for _, e := range entries {
		part(e.Key)
		part(e.Value)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ControlStore keeps the operator controls every checker applies. The
// Redis counter store and [MemStore] implement it.
type ControlStore interface {
	// PutControl stores c, replacing the control with the same id.
	PutControl(ctx context.Context, c Control) error
	// DeleteControl removes the control id and reports whether it existed.
	DeleteControl(ctx context.Context, id string) (bool, error)
	// Controls returns the store's version and, when it differs from
	// since, every control not expired at now (else nil).
	Controls(ctx context.Context, since, now int64) (version int64, cs []Control, err error)
}

// ShardKey names shard i of a counter key spread over shards (a rule's
// `shards: N`): each shard is a counter of its own in the store. The
// suffix "|#i" is no entry of a counter key (every entry holds an
// unescaped '='; see [config.AppendCounterKey]), so no value a request
// carries names a shard of another key.
func ShardKey(key string, i int64) string { return key + "|#" + strconv.FormatInt(i, 10) }
