package checker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
)

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
}

// IdempotencyKey is what a store remembers the answer under: the request
// id bound to the counter (the store's key) and the cost, so that another
// checker that has not seen the id never replays an answer given to a
// different request. Empty without a request id.
func (q *SyncRequest) IdempotencyKey() string {
	if q.RequestID == "" {
		return ""
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

// SyncStore is the part of a [CounterStore] that runs `mode: sync`
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
	q := SyncRequest{Key: key, Algorithm: r.Algorithm, Limit: r.Capacity(), Window: int64(r.Window), Cost: cost}
	if r.Algorithm.Bucket() {
		q.Tokens = r.Limit
	}
	return q
}

// memSync is MemStore's sync state: the exact limiter itself.
type memSync struct {
	once  sync.Once
	keyed *limiter.Keyed
}

// ChargeSync implements [SyncStore] with limiter.Keyed: the reference the
// Redis scripts are tested against.
func (s *MemStore) ChargeSync(_ context.Context, q *SyncRequest) (SyncResult, error) {
	if err := s.check(); err != nil {
		return SyncResult{}, err
	}
	alg, err := syncAlgorithm(q)
	if err != nil {
		return SyncResult{}, err
	}
	s.sync.once.Do(func() {
		s.sync.keyed, _ = limiter.NewKeyed(limiter.WithIdempotency(time.Hour, 1<<16))
	})
	now := q.Now
	if now == 0 {
		now = s.now()
	}
	d, err := s.sync.keyed.AllowAt(syncKey(q), alg, now, q.Cost, q.IdempotencyKey())
	if err != nil && !errors.Is(err, limiter.ErrCostExceedsLimit) {
		return SyncResult{}, err
	}
	return SyncResult{Allowed: d.Allowed, Remaining: d.Remaining, ResetAfter: max(d.ResetAfter, 0),
		RetryAfter: d.RetryAfter, Token: fmt.Sprint(now)}, nil
}

// RefundSync implements [SyncStore].
func (s *MemStore) RefundSync(_ context.Context, q *SyncRequest, _ string) error {
	if err := s.check(); err != nil {
		return err
	}
	alg, err := syncAlgorithm(q)
	if err != nil || s.sync.keyed == nil {
		return err
	}
	now := q.Now
	if now == 0 {
		now = s.now()
	}
	return s.sync.keyed.RefundAt(syncKey(q), alg, now, q.Cost)
}

// ResetSync implements [Resetter].
func (s *MemStore) ResetSync(_ context.Context, q *SyncRequest) error {
	if err := s.check(); err != nil {
		return err
	}
	alg, err := syncAlgorithm(q)
	if err != nil || s.sync.keyed == nil {
		return err
	}
	s.sync.keyed.Reset(syncKey(q), alg)
	return nil
}

func syncKey(q *SyncRequest) string { return string(q.Algorithm) + "|" + q.Key }

// now is the store's own clock (SetClock), the wall clock by default.
func (s *MemStore) now() int64 {
	if c := s.clock.Load(); c != nil {
		return (*c).Now()
	}
	return time.Now().UnixNano()
}

// SetClock makes clk the store's own clock (for `mode: sync` decisions),
// as Redis TIME is for the Redis store. Tests share their fake clock.
func (s *MemStore) SetClock(clk limiter.Clock) { s.clock.Store(&clk) }
