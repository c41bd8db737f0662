package counters

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
)

// A `mode: sync` fixed or Envoy window needs no script: one INCRBY
// decides, atomic in Redis, and PEXPIREAT gives the window its end. Both
// go in the batch's pipeline, keyed by the window of the caller's clock
// (kept within max_clock_skew of the store's); the key is the one the
// script would use, so refunds, resets and scripted decisions (those with
// a request id) share the counter. A fixed window's refusal takes its
// hits back with DECRBY in a second pipeline (docs/design.md, "mode:
// sync"). Sliding windows, buckets and the log keep their scripts: their
// check reads before it writes.

// plainCall is one sync decision made with plain commands.
type plainCall struct {
	incr     *redis.IntCmd // nil: the cost never fits, nothing was sent
	key      string
	end, now int64 // the window's end and the caller's clock, µs
}

// plain reports whether q is decided with plain commands: a fixed or
// Envoy window, no request id (its stored answer needs the script), the
// caller's clock given.
func plain(q *SyncRequest) bool {
	return (q.Algorithm == config.AlgFixedWindow || q.Algorithm == config.AlgEnvoy) && q.RequestID == "" &&
		q.Clock > 0 && q.Now == 0 && q.Window >= int64(time.Microsecond)
}

// queuePlain sends q's INCRBY and PEXPIREAT on p.
func (r *Redis) queuePlain(ctx context.Context, p redis.Pipeliner, q *SyncRequest) *plainCall {
	us := int64(time.Microsecond)
	ws := limiter.WindowStart(q.Clock, q.Window) / us
	pc := &plainCall{end: ws + q.Window/us, now: q.Clock / us}
	if q.Cost > q.Limit && q.Algorithm != config.AlgEnvoy {
		return pc // never fits: nothing changes (Envoy's window still counts it)
	}
	pc.key = r.base(q.Key+"|"+string(q.Algorithm)) + ":s:" + strconv.FormatInt(ws, 10)
	pc.incr = p.IncrBy(ctx, pc.key, q.Cost)
	// the script's expiry, as an instant: a second past the window's end
	p.PExpireAt(ctx, pc.key, time.UnixMilli(pc.end/1000+1000))
	return pc
}

// answer reads pc's decision of q; takeBack: a refusal of a fixed window,
// whose hits the INCRBY counted and a DECRBY must take back.
func (pc *plainCall) answer(q *SyncRequest) (res SyncResult, takeBack bool, err error) {
	if pc.incr == nil {
		res.RetryAfter = limiter.Never
		return res, false, nil
	}
	res.Token = strconv.FormatInt(pc.end-q.Window/int64(time.Microsecond), 10)
	cur, err := pc.incr.Result()
	if err != nil {
		return SyncResult{}, false, unavailable("sync charge", err)
	}
	never := q.Cost > q.Limit
	res.Allowed = !never && cur <= q.Limit
	if !res.Allowed && q.Algorithm != config.AlgEnvoy {
		cur -= q.Cost
		takeBack = true
	}
	res.Remaining = max(0, q.Limit-cur)
	left := time.Duration((pc.end - pc.now) * int64(time.Microsecond))
	if cur > 0 {
		res.ResetAfter = left
	}
	switch {
	case never:
		res.RetryAfter = limiter.Never
	case !res.Allowed:
		res.RetryAfter = left
	}
	return res, takeBack, nil
}

// takeBack sends the DECRBY of each refused fixed window, with its expiry
// again: had the window's key expired since, the DECRBY would make one
// that never expires.
func (r *Redis) takeBack(ctx context.Context, calls []*plainCall, costs []int64) {
	p := r.c.Pipeline()
	for i, pc := range calls {
		p.DecrBy(ctx, pc.key, costs[i])
		p.PExpireAt(ctx, pc.key, time.UnixMilli(pc.end/1000+1000))
	}
	p.Exec(ctx) // a failure leaves the hits counted: fewer admissions, never more
}
