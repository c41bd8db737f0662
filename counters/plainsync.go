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
// decides, atomic in Redis, and PEXPIRE gives the window its end. Both
// go in the batch's pipeline, keyed by the window of the caller's clock
// (kept within max_clock_skew of the store's); the key is the one the
// script would use, so refunds, resets and scripted decisions (those with
// a request id) share the counter. A fixed window's refusals take their
// hits back with DECRBY in a second pipeline (docs/design.md, "mode:
// sync"). Sliding windows, buckets and the log keep their scripts: their
// check reads before it writes.

// plainCall is the plain commands of one window key in a batch: one
// INCRBY of every decision's cost, decided in the batch's order as the
// script would decide them one after another.
type plainCall struct {
	incr     *redis.IntCmd // nil: no decision of it counts (each cost never fits)
	key      string
	end, now int64 // the window's end and the first decision's clock, µs
	ops      []*Op // its decisions, in the batch's order
	sent     int64 // the cost the INCRBY added
	counted  bool  // a decision counts (else none is sent: each cost never fits)
	back     int64 // what refusals take back
}

// plain reports whether q is decided with plain commands: a fixed or
// Envoy window, no request id (its stored answer needs the script), the
// caller's clock given.
func plain(q *SyncRequest) bool {
	return (q.Algorithm == config.AlgFixedWindow || q.Algorithm == config.AlgEnvoy) && q.RequestID == "" && !q.Force &&
		q.Clock > 0 && q.Now == 0 && q.Window >= int64(time.Microsecond)
}

// counts says whether q's cost is counted: always in Envoy's window, else
// when it can fit at all (a cost past the limit changes nothing).
func counts(q *SyncRequest) bool { return q.Cost <= q.Limit || q.Algorithm == config.AlgEnvoy }

// plainKey is the window key q names, the one the script uses.
func (r *Redis) plainKey(q *SyncRequest) (key string, end int64) {
	us := int64(time.Microsecond)
	ws := limiter.WindowStart(q.Clock, q.Window) / us
	return r.base(q.Key+"|"+string(q.Algorithm)) + ":s:" + strconv.FormatInt(ws, 10), ws + q.Window/us
}

// plainCalls gathers a batch's plain decisions by window key.
func (r *Redis) plainCalls(ops []*Op, need func(*Op) bool) []*plainCall {
	var calls []*plainCall
	var byKey map[string]*plainCall
	for _, op := range ops {
		if !op.Sync || !need(op) || !plain(&op.SyncReq) {
			continue
		}
		q := &op.SyncReq
		key, end := r.plainKey(q)
		pc := byKey[key]
		if pc == nil {
			if byKey == nil {
				byKey = map[string]*plainCall{}
			}
			pc = &plainCall{key: key, end: end, now: q.Clock / int64(time.Microsecond)}
			byKey[key] = pc
			calls = append(calls, pc)
		}
		pc.ops = append(pc.ops, op)
		if counts(q) {
			pc.sent, pc.counted = pc.sent+q.Cost, true
		}
	}
	return calls
}

// queue sends pc's INCRBY and its window's expiry on p.
func (pc *plainCall) queue(ctx context.Context, p redis.Pipeliner) {
	if !pc.counted {
		return // every cost never fits: nothing changes
	}
	pc.incr = p.IncrBy(ctx, pc.key, pc.sent)
	p.PExpire(ctx, pc.key, pc.ttl())
}

// ttl is the script's expiry: a second past the window's end, counted from
// the decision's clock (a late batch only keeps the key longer).
func (pc *plainCall) ttl() time.Duration {
	return time.Duration(max(pc.end-pc.now, 0))*time.Microsecond + time.Second
}

// answer decides pc's decisions in order from what the INCRBY answered:
// the count before them is its answer less what they added; a fixed
// window's refusal takes its hits back (pc.back, a DECRBY to send).
func (pc *plainCall) answer() {
	var cur int64
	if pc.incr != nil {
		v, err := pc.incr.Result()
		if err != nil {
			for _, op := range pc.ops {
				op.Err = unavailable("sync charge", err)
			}
			return
		}
		cur = v - pc.sent
	}
	us := int64(time.Microsecond)
	left := time.Duration((pc.end - pc.now) * us)
	token := strconv.FormatInt(pc.end-pc.ops[0].SyncReq.Window/us, 10)
	for _, op := range pc.ops {
		q := &op.SyncReq
		res := SyncResult{RetryAfter: limiter.Never}
		if counts(q) {
			cur += q.Cost
			res = SyncResult{Allowed: q.Cost <= q.Limit && cur <= q.Limit, Token: token}
			if !res.Allowed && q.Algorithm != config.AlgEnvoy {
				cur -= q.Cost
				pc.back += q.Cost
			}
			res.Remaining = max(0, q.Limit-cur)
			if cur > 0 {
				res.ResetAfter = left
			}
			switch {
			case q.Cost > q.Limit:
				res.RetryAfter = limiter.Never
			case !res.Allowed:
				res.RetryAfter = left
			}
		}
		op.SyncAnswer, op.Err = res, nil
	}
}

// takeBack sends the DECRBY of each window's refused hits, with its expiry
// again: had the key expired since, the DECRBY would make one that never
// expires. A failure leaves the hits counted: fewer admissions, never more.
func (r *Redis) takeBack(ctx context.Context, calls []*plainCall) {
	var p redis.Pipeliner
	for _, pc := range calls {
		if pc.back == 0 {
			continue
		}
		if p == nil {
			p = r.c.Pipeline()
		}
		p.DecrBy(ctx, pc.key, pc.back)
		p.PExpire(ctx, pc.key, pc.ttl())
	}
	if p != nil {
		p.Exec(ctx)
	}
}
