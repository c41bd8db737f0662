package counters

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// Delivered is a delta as the aggregator read it: which partition it came
// from matters for the at-most-once filter.
type Delivered struct {
	Partition int
	Delta     *eventsv1.Delta
}

// ApplyResult counts what ApplyBatch did.
type ApplyResult struct {
	Applied, Skipped int
	// AlreadyApplied counts deltas a near-limit or sync charge applied
	// when it was decided: they carry analytics only and cost no Redis work.
	AlreadyApplied int
	Scripts        int // script calls: one per slot's counters of the batch (applyKeysMax at most)
	RoundTrips     int // pipelines sent (a cluster splits one per node)
}

// apply applies deltas to counters (windows or buckets), at most once
// each: a delta whose sequence is not above the highest applied to its
// counter for its (instance, partition) — the counter's field
// q:<instance>|<partition> — is skipped. For each delta it adds only
// what lies above the instance's part (own_after), so hits a near-limit
// charge already folded in are not added twice. The watermark lives in
// the counter's own hash and expires with it: a copy that comes after
// its window expired lands on a window nobody reads any more, and one
// that comes after its bucket expired (full again) carries a TAT in the
// past, which adds no debt.
//
// KEYS the counters (on a cluster, one counter's keys: one slot). ARGV[1] now µs; then
// for each key in turn: kind ("w" or "b"), TTL in ms (a window) or slack
// in ms (a bucket), the number of deltas, for a bucket its rate tokens and
// period µs, then 7 values per delta: instance, partition, sequence,
// counted, own_after, first µs, tat_after µs.
//
// Returns {applied, skipped}.
var apply = redis.NewScript(`
local now = tonumber(ARGV[1])
local a = 2
local applied, skipped = 0, 0
for k = 1, #KEYS do
  local K = KEYS[k]
  local bucket = ARGV[a] == 'b'
  local ttl, n = tonumber(ARGV[a+1]), tonumber(ARGV[a+2])
  a = a + 3
  local tokens, period, tf, tat = 1, 1, 't', 0
  if bucket then
    tokens, period, tf = tonumber(ARGV[a]), tonumber(ARGV[a+1]), 'c'
    a = a + 2
    tat = tonumber(redis.call('HGET', K, 'tat') or '0')
  end
  for j = 1, n do
    local inst, seq = ARGV[a], tonumber(ARGV[a+2])
    local qf, f = 'q:' .. inst .. '|' .. ARGV[a+1], 'i:' .. inst
    -- one read and one write of the counter per delta: the watermark,
    -- the instance's part, whether it is new to the counter ('n' counts
    -- instances), and the total ('t', or a bucket's cumulative 'c')
    local v = redis.call('HMGET', K, qf, f, 's:' .. inst, tf, 'n')
    if seq <= tonumber(v[1] or '0') then
      skipped = skipped + 1
    else
      applied = applied + 1
      local counted, ownAfter = tonumber(ARGV[a+3]), tonumber(ARGV[a+4])
      local own = tonumber(v[2] or '0')
      local add = counted
      if ownAfter > 0 then add = math.max(0, math.min(counted, ownAfter - own)) end
      if bucket then
        local span = 0
        if add > 0 then span = math.ceil(add * period / tokens) end
        tat = math.max(math.max(tat, tonumber(ARGV[a+5])) + span, tonumber(ARGV[a+6]))
      end
      local total = tonumber(v[4] or '0') + add
      local q = string.format('%d', seq)
      if not v[2] and not v[3] then
        redis.call('HSET', K, qf, q, f, math.max(own + add, ownAfter), tf, total, 'n', tonumber(v[5] or '0') + 1)
      else
        redis.call('HSET', K, qf, q, f, math.max(own + add, ownAfter), tf, total)
      end
    end
    a = a + 7
  end
  if bucket then
    redis.call('HSET', K, 'tat', string.format('%d', tat))
    redis.call('PEXPIRE', K, math.max(1, math.ceil((tat - now) / 1000)) + ttl)
  else
    redis.call('PEXPIRE', K, ttl)
  end
end
return {applied, skipped}
`)

// A script call carries at most applyKeysMax counters and about
// applyArgsMax arguments: big enough that Redis runs a script per
// hundred counters rather than per counter (a script's own cost is a
// third of a new counter's), small enough that one call never holds the
// server for long.
const (
	applyKeysMax = 100
	applyArgsMax = 4096
)

// applyGroup is one counter's deltas in a batch.
type applyGroup struct {
	key, slot string // slot: its hash tag in a cluster (its keys share a slot), "" otherwise
	args      []any
}

// ApplyBatch applies deltas at most once each, grouped per counter (and
// window), each counter atomically: the counters of one slot go to one
// script call (on a standalone server or Sentinel, any counters; in a
// cluster, one counter's windows), all calls in one pipeline (in a
// cluster, one per node). Deltas marked already applied need nothing
// here: the charge that decided them applied their hits, and the
// at-most-once watermark only has to cover the deltas this applies (a
// copy of one of them is still at or below it).
func (r *Redis) ApplyBatch(ctx context.Context, batch []Delivered) (ApplyResult, error) {
	groups := map[string]*applyGroup{}
	var order []*applyGroup
	var res ApplyResult
	now := r.clock()
	_, cluster := r.c.(*redis.ClusterClient)
	for _, x := range batch {
		d := x.Delta
		if d.AlreadyApplied {
			res.AlreadyApplied++
			continue
		}
		var gk string
		bucket := config.Algorithm(d.Algorithm).Bucket()
		if bucket {
			gk = r.BucketKey(d.CounterKey)
		} else {
			gk = r.WindowKey(d.CounterKey, d.WindowStartUnixNanos)
		}
		g := groups[gk]
		if g == nil {
			g = &applyGroup{key: gk}
			if cluster {
				g.slot = r.base(d.CounterKey)
			}
			if bucket {
				g.args = []any{"b", int64(r.slack.Milliseconds()), 0, d.RateTokens, d.WindowNanos / 1000}
			} else {
				g.args = []any{"w", r.windowTTL(d.WindowStartUnixNanos, d.WindowNanos, now), 0}
			}
			groups[gk] = g
			order = append(order, g)
		}
		g.args[2] = g.args[2].(int) + 1
		g.args = append(g.args, d.InstanceId, x.Partition, d.Sequence, d.CountedCost, d.OwnAfter,
			d.FirstUnixNanos/1000, ceilDiv(d.TatAfterUnixNanos, 1000))
	}
	if len(order) == 0 {
		return res, nil
	}
	calls := applyCalls(order, now/1000)
	// EVALSHA throughout the pipeline; the script is loaded on first use
	// and again if a server lost it (restart, SCRIPT FLUSH).
	var cmds []*redis.Cmd
	for attempt := 0; ; attempt++ {
		if !r.loaded.Load() {
			if err := apply.Load(ctx, r.c).Err(); err != nil {
				return res, unavailable("load apply script", err)
			}
			res.RoundTrips++
			r.loaded.Store(true)
		}
		p := r.c.Pipeline()
		cmds = make([]*redis.Cmd, len(calls))
		for i, c := range calls {
			cmds[i] = apply.EvalSha(ctx, p, c.keys, c.args...)
		}
		_, err := p.Exec(ctx)
		res.RoundTrips++
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
			r.loaded.Store(false)
			continue
		}
		res.Scripts += len(cmds) // the calls that ran (a NOSCRIPT round ran none)
		if err != nil && !errors.Is(err, redis.Nil) {
			return res, unavailable("apply", err)
		}
		break
	}
	for _, cmd := range cmds {
		v, err := ints(cmd.Val())
		if err != nil || len(v) != 2 {
			return res, fmt.Errorf("counters: apply answered %v: %v", cmd.Val(), err)
		}
		res.Applied += int(v[0])
		res.Skipped += int(v[1])
	}
	return res, nil
}

// applyCall is one script call: its counters and their arguments.
type applyCall struct {
	keys []string
	args []any
}

// applyCalls packs groups into script calls: consecutive groups of one
// slot share a call up to applyKeysMax counters and applyArgsMax
// arguments (a group larger than that has a call of its own). Groups of
// one slot are consecutive unless a cluster interleaves them, which
// costs calls, never correctness.
func applyCalls(groups []*applyGroup, nowMicros int64) []applyCall {
	var calls []applyCall
	var cur *applyCall
	slot := ""
	for _, g := range groups {
		if cur == nil || g.slot != slot || len(cur.keys) >= applyKeysMax || len(cur.args)+len(g.args) > applyArgsMax {
			calls = append(calls, applyCall{args: []any{nowMicros}})
			cur, slot = &calls[len(calls)-1], g.slot
		}
		cur.keys = append(cur.keys, g.key)
		cur.args = append(cur.args, g.args...)
	}
	return calls
}
