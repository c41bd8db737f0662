package counters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the shared counter store in Redis (standalone, Sentinel or
// Cluster through a go-redis UniversalClient). It implements
// Store, and ApplyBatch for the aggregator. Safe for
// concurrent use.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	slack  time.Duration
	clock  func() int64 // unix ns, for expiries
	loaded atomic.Bool  // the apply script is loaded on the servers
	// pin, in tests only, replaces the server's clock in the `mode: sync`
	// scripts; production always uses Redis TIME.
	pin func() int64
}

// PinClock makes the `mode: sync` scripts run on clock (unix ns) instead
// of the Redis server's TIME. For the conformance suite only, which drives
// the scripts and the exact limiter through the same instants; production
// never calls it.
func (r *Redis) PinClock(clock func() int64) { r.pin = clock }

// Ping checks that the servers answer (every node of a cluster).
func (r *Redis) Ping(ctx context.Context) error {
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
	}
	return r.c.Ping(ctx).Err()
}

// NewRedis returns a store over c whose keys start with prefix ("vr" if
// empty). Expiries get slack on top (a minute if zero).
func NewRedis(c redis.UniversalClient, prefix string, slack time.Duration) *Redis {
	if prefix == "" {
		prefix = "vr"
	}
	if slack <= 0 {
		slack = time.Minute
	}
	return &Redis{c: c, prefix: prefix, slack: slack, clock: func() int64 { return time.Now().UnixNano() }}
}

// base returns the key stem of a counter: prefix, hash tag, counter key.
func (r *Redis) base(counter string) string { return r.key(counter, "", 0, false) }

// key builds prefix:{fnv64a(counter) hex}:counter + suffix [+ n] in one
// allocation: the refresher and the aggregator build one per counter read
// or applied, thousands per second.
func (r *Redis) key(counter, suffix string, n int64, withN bool) string {
	h := uint64(14695981039346656037) // FNV-1a 64, as hash/fnv, without its allocation
	for i := 0; i < len(counter); i++ {
		h ^= uint64(counter[i])
		h *= 1099511628211
	}
	var b strings.Builder
	b.Grow(len(r.prefix) + 20 + len(counter) + len(suffix) + 20)
	b.WriteString(r.prefix)
	b.WriteString(":{")
	var num [20]byte
	b.Write(strconv.AppendUint(num[:0], h, 16))
	b.WriteString("}:")
	b.WriteString(counter)
	b.WriteString(suffix)
	if withN {
		b.Write(strconv.AppendInt(num[:0], n, 10))
	}
	return b.String()
}

// WindowKey is the Redis key of counter's window starting at start.
func (r *Redis) WindowKey(counter string, start int64) string {
	return r.key(counter, ":w:", start, true)
}

// BucketKey is the Redis key of counter's bucket state.
func (r *Redis) BucketKey(counter string) string { return r.key(counter, ":b", 0, false) }

func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %v", ErrStoreUnavailable, op, err)
}

// windowTTL keeps a window one window past its end (a sliding window
// still weighs it), plus slack.
func (r *Redis) windowTTL(start, window, now int64) int64 {
	return max(1, (start+2*window-now)/int64(time.Millisecond)) + int64(r.slack/time.Millisecond)
}

// Read implements Store: one pipeline for the batch (in a
// cluster, one per node).
func (r *Redis) Read(ctx context.Context, instance string, items []ReadItem) error {
	if len(items) == 0 {
		return nil
	}
	f, sf, zf := "i:"+instance, "s:"+instance, "z:"+instance
	p := r.c.Pipeline()
	gets := make([]*redis.SliceCmd, len(items))
	for i := range items {
		it := &items[i]
		if it.Kind == KindTAT {
			gets[i] = p.HMGet(ctx, r.BucketKey(it.Key), "tat", "c", "n", f, sf, zf, "g")
		} else {
			gets[i] = p.HMGet(ctx, r.WindowKey(it.Key, it.Window), "t", "c", "n", f, sf, zf, "g")
		}
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("read", err)
	}
	for i := range items {
		it := &items[i]
		vals := gets[i].Val()
		*it = ReadItem{Key: it.Key, Kind: it.Kind, Window: it.Window}
		if len(vals) != 7 {
			continue
		}
		for _, v := range vals {
			it.Found = it.Found || v != nil
		}
		it.Total, it.Cum, it.Instances = num(vals[0]), num(vals[1]), int(num(vals[2]))
		it.OwnMem, it.OwnSync, it.Base, it.Gen = num(vals[3]), num(vals[4]), num(vals[5]), num(vals[6])
		it.Own = it.OwnMem + it.OwnSync - it.Base
		if it.Kind == KindTAT {
			it.Total *= int64(time.Microsecond)
		}
	}
	return nil
}

// num reads an HMGET value: nil (absent) is 0.
func num(v any) int64 {
	s, ok := v.(string)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64) // Lua may have written a float form
		if ferr != nil {
			return 0
		}
		return int64(f)
	}
	return n
}

func ints(v any) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("counters: script answered %T, want an array", v)
	}
	out := make([]int64, len(arr))
	for i, x := range arr {
		switch y := x.(type) {
		case int64:
			out[i] = y
		case string:
			n, err := strconv.ParseInt(y, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("counters: script answered %q at %d", y, i)
			}
			out[i] = n
		default:
			return nil, fmt.Errorf("counters: script answered %T at %d", x, i)
		}
	}
	return out, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Charge implements Store.
func (r *Redis) Charge(ctx context.Context, q *ChargeRequest) (ChargeResult, error) {
	script, keys, args := r.chargeCall(q)
	res, err := script.Run(ctx, r.c, keys, args...).Result()
	if err != nil {
		return ChargeResult{}, unavailable("charge", err)
	}
	return parseCharge(q.Kind, res)
}

// chargeCall is the script, keys and arguments of one charge.
func (r *Redis) chargeCall(q *ChargeRequest) (*redis.Script, []string, []any) {
	if q.Kind == KindTAT {
		us := int64(time.Microsecond)
		return chargeBucket, []string{r.BucketKey(q.Key)}, []any{q.Instance, q.Cost, q.Burst, q.RateTokens, q.WindowNanos / us,
			q.OwnCum, ceilDiv(q.LocalTAT, us), q.Now / us, int64(r.slack / time.Millisecond)}
	}
	W := q.WindowNanos
	elapsed := min(max(q.Now-q.Window, 0), W)
	bool01 := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	args := make([]any, 15, 15+len(q.Others))
	args[0], args[1], args[2], args[3], args[4], args[5] = q.Instance, q.Cost, q.Ceiling, q.OwnEmitted, bool01(q.Sliding), q.PrevEmitted
	args[6], args[7], args[8] = ceilDiv(W-elapsed, int64(time.Millisecond)), W/int64(time.Millisecond), bool01(q.ChargeDenied)
	args[9], args[10], args[11], args[12] = r.windowTTL(q.Window, W, q.Now), r.windowTTL(q.Window-W, W, q.Now), q.OtherShards, q.PrevOtherShards
	args[13], args[14] = max(q.Allowance, 0), bool01(q.Mark)
	if q.Allowance > 0 {
		for _, o := range q.Others {
			args = append(args, o)
		}
	}
	return chargeWindow, []string{r.WindowKey(q.Key, q.Window), r.WindowKey(q.Key, q.Window-W)}, args
}

// parseCharge reads a charge script's answer.
func parseCharge(kind Kind, res any) (ChargeResult, error) {
	v, err := ints(res)
	if kind == KindTAT {
		if err != nil || len(v) != 9 {
			return ChargeResult{}, fmt.Errorf("counters: charge bucket: %v %v", v, err)
		}
		us := int64(time.Microsecond)
		return ChargeResult{Allowed: v[0] == 1, Total: v[1] * us, Cum: v[2], Own: v[3], Instances: int(v[4]),
			OwnMem: v[5], OwnSync: v[6], Base: v[7], Gen: v[8]}, nil
	}
	if err != nil || len(v) != 11 {
		return ChargeResult{}, fmt.Errorf("counters: charge window: %v %v", v, err)
	}
	return ChargeResult{Allowed: v[0] == 1, Total: v[1], Own: v[2], PrevTotal: v[3], PrevOwn: v[4],
		Instances: int(v[5]), OwnMem: v[6], OwnSync: v[7], Base: v[8], PrevBase: v[9], Reserved: v[10]}, nil
}

// Refund implements Store.
func (r *Redis) Refund(ctx context.Context, q *ChargeRequest) error {
	key, tat := r.WindowKey(q.Key, q.Window), int64(0)
	if q.Kind == KindTAT {
		key = r.BucketKey(q.Key)
		tat = ceilDiv(q.Cost*(q.WindowNanos/int64(time.Microsecond)), q.RateTokens)
	}
	return unavailable("refund", refund.Run(ctx, r.c, []string{key}, q.Instance, q.Cost, tat).Err())
}

// Reset implements Resetter (EVAL, not EVALSHA: a pipeline cannot
// fall back on NOSCRIPT, and resets are rare): one script per key (a hot key's
// shards live in different slots), all in one pipeline.
func (r *Redis) Reset(ctx context.Context, items []ResetItem) error {
	p := r.c.Pipeline()
	for _, it := range items {
		if it.Kind == KindTAT {
			resetCounter.Eval(ctx, p, []string{r.BucketKey(it.Key)}, "b")
		} else {
			resetCounter.Eval(ctx, p, []string{r.WindowKey(it.Key, it.Window)}, "w")
		}
	}
	_, err := p.Exec(ctx)
	return unavailable("reset", err)
}
