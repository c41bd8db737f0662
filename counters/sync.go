package counters

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
)

// syncKeys are the keys of a `mode: sync` counter, in the counter's hash
// tag (the layout: docs/design.md).
func (r *Redis) syncKeys(q *SyncRequest) []string {
	if q.Algorithm == config.AlgConcurrency {
		counter, rule := r.leaseKeys(q)
		return []string{counter, rule, counter[:len(counter)-len(":l")] + ":r:" + q.IdempotencyKey()}
	}
	stem := r.base(q.Key + "|" + string(q.Algorithm))
	rid := stem + ":r:" + q.IdempotencyKey()
	switch {
	case q.Algorithm.Bucket():
		return []string{stem + ":g", rid}
	case q.Algorithm == config.AlgSlidingLog:
		return []string{stem + ":l", stem + ":lm", rid}
	}
	return []string{stem + ":s", rid}
}

// ResetSync implements Resetter: every key of the counter (both
// windows a sliding window weighs, the TAT, the log); stored answers of
// idempotent requests stay.
func (r *Redis) ResetSync(ctx context.Context, q *SyncRequest) error {
	if q.Algorithm == config.AlgConcurrency { // every lease of the counter goes
		counter, rule := r.leaseKeys(q)
		return unavailable("reset leases", resetLeases.Run(ctx, r.c, []string{counter, rule}).Err())
	}
	stem := r.base(q.Key + "|" + string(q.Algorithm))
	us := int64(time.Microsecond)
	now := q.Now
	if now == 0 && r.pin != nil {
		now = r.pin()
	}
	var keys []string
	var window int64
	switch {
	case q.Algorithm.Bucket():
		keys = []string{stem + ":g", stem + ":g"}
	case q.Algorithm == config.AlgSlidingLog:
		keys = []string{stem + ":l", stem + ":l", stem + ":lm"}
	default:
		keys, window = []string{stem + ":s"}, q.Window/us
	}
	return unavailable("reset sync", resetSync.Run(ctx, r.c, keys, window, now/us).Err())
}

// ChargeSync implements SyncStore: the rule's algorithm, atomic in
// one script, on the Redis server's clock.
func (r *Redis) ChargeSync(ctx context.Context, q *SyncRequest) (SyncResult, error) {
	script, keys, args, err := r.syncCall(q)
	if err != nil {
		return SyncResult{}, err
	}
	res, err := script.Run(ctx, r.c, keys, args...).Result()
	if err != nil {
		return SyncResult{}, unavailable("sync charge", err)
	}
	return parseSync(res)
}

// syncCall is the script, keys and arguments of one sync decision.
func (r *Redis) syncCall(q *SyncRequest) (*redis.Script, []string, []any, error) {
	us := int64(time.Microsecond)
	ttl := int64(0)
	if q.RequestID != "" {
		ttl = max(int64(q.IdempotencyTTL/time.Millisecond), 1)
	}
	keys := r.syncKeys(q)
	force := 0
	if q.Force {
		force = 1
	}
	now := q.Now
	if now == 0 && r.pin != nil {
		now = r.pin()
	}
	switch q.Algorithm {
	case config.AlgEnvoy, config.AlgFixedWindow, config.AlgSlidingWindow:
		kind := "s"
		switch q.Algorithm {
		case config.AlgEnvoy:
			kind = "e"
		case config.AlgFixedWindow:
			kind = "f"
		}
		return syncWindow, keys, []any{now / us, ttl, kind, q.Limit, q.Window / us, q.Cost, force}, nil
	case config.AlgTokenBucket, config.AlgGCRA, config.AlgLeakyBucket:
		return syncBucket, keys, []any{now / us, ttl, q.Limit, q.Tokens, q.Window / us, q.Cost, force}, nil
	case config.AlgSlidingLog:
		return syncLog, keys, []any{now / us, ttl, q.Limit, q.Window / us, q.Cost, force}, nil
	case config.AlgConcurrency:
		if err := checkLease(q); err != nil {
			return nil, nil, nil, err
		}
		return syncLease, keys, []any{now / us, ttl, q.Limit, q.Window / us, q.Cost, q.Lease}, nil
	}
	return nil, nil, nil, fmt.Errorf("counters: sync: unknown algorithm %q", q.Algorithm)
}

// parseSync reads a sync script's answer.
func parseSync(res any) (SyncResult, error) {
	us := int64(time.Microsecond)
	arr, ok := res.([]any)
	if !ok || len(arr) != 5 {
		return SyncResult{}, fmt.Errorf("counters: sync charge answered %v", res)
	}
	v, err := ints(arr[:4])
	if err != nil {
		return SyncResult{}, err
	}
	out := SyncResult{Allowed: v[0] == 1, Remaining: v[1], ResetAfter: time.Duration(v[2] * us),
		RetryAfter: time.Duration(v[3] * us)}
	if v[3] < 0 {
		out.RetryAfter = limiter.Never
	}
	switch t := arr[4].(type) {
	case string:
		out.Token = t
	case int64:
		out.Token = strconv.FormatInt(t, 10)
	}
	return out, nil
}

// RefundSync implements SyncStore.
func (r *Redis) RefundSync(ctx context.Context, q *SyncRequest, token string) error {
	if q.Algorithm == config.AlgConcurrency { // the lease the refused request took
		if token == "" {
			return nil
		}
		_, err := r.ReleaseLease(ctx, q, token)
		return err
	}
	keys := r.syncKeys(q)
	kind, perToken := "w", 0.0
	switch {
	case q.Algorithm.Bucket():
		kind, perToken = "b", float64(q.Window/int64(time.Microsecond))/float64(q.Tokens)
	case q.Algorithm == config.AlgSlidingLog:
		kind = "l"
	}
	if kind != "l" {
		keys = keys[:1]
		keys = append(keys, keys[0]) // a second key of the same slot keeps the script's arity
	}
	return unavailable("sync refund", syncRefund.Run(ctx, r.c, keys[:2], kind, token, q.Cost, perToken).Err())
}
