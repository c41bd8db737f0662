package rulestore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clientKeys names a table's keys, all under one hash tag: the clients
// (a hash of encoded client → plan), the sequence number, the log (a
// stream whose entry ids are the sequence numbers their batches reached)
// and the plans in use (a hash of plan → its clients).
func (r *redisBackend) clientKeys(domain, table string) (clients, seq, log, plans string) {
	base := r.prefix + ":clients:{" + base64.RawURLEncoding.EncodeToString([]byte(domain)) + "." + table + "}"
	return base + ":h", base + ":s", base + ":x", base + ":p"
}

// setClientsScript applies a batch: KEYS the table's keys (clientKeys'
// order); ARGV[1] the log's payload, ARGV[2] the changes the log keeps at
// least, ARGV[3] the most plan names, then field, plan pairs. The plans
// in use are counted (KEYS[4]: plan → clients), so a name no client has
// any more is forgotten; the names the batch would leave in use are
// counted before anything is written: a refused batch changes nothing.
// It returns the new sequence number, or -(the plan names the table
// would have) when there would be too many.
var setClientsScript = redis.NewScript(`
local n = (#ARGV - 3) / 2
local cur, delta, order = {}, {}, {}
local function bump(plan, d)
  if delta[plan] == nil then delta[plan] = 0; order[#order + 1] = plan end
  delta[plan] = delta[plan] + d
end
for i = 0, n - 1 do
  local field, plan = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  local old = cur[field]
  if old == nil then old = redis.call('HGET', KEYS[1], field) or '' end
  if old ~= '' then bump(old, -1) end
  if plan ~= '' then bump(plan, 1) end
  cur[field] = plan
end
local names = redis.call('HLEN', KEYS[4])
for _, plan in ipairs(order) do
  local had = tonumber(redis.call('HGET', KEYS[4], plan) or '0')
  local will = had + delta[plan]
  if had == 0 and will > 0 then names = names + 1 end
  if had > 0 and will <= 0 then names = names - 1 end
end
if names > tonumber(ARGV[3]) then return -names end
for i = 0, n - 1 do
  local field, plan = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  if plan == '' then redis.call('HDEL', KEYS[1], field) else redis.call('HSET', KEYS[1], field, plan) end
end
for _, plan in ipairs(order) do
  if delta[plan] ~= 0 and redis.call('HINCRBY', KEYS[4], plan, delta[plan]) <= 0 then
    redis.call('HDEL', KEYS[4], plan)
  end
end
local seq = redis.call('INCRBY', KEYS[2], n)
local keep = seq - tonumber(ARGV[2])
if keep < 1 then keep = 1 end
redis.call('XADD', KEYS[3], 'MINID', '~', keep, seq .. '-0', 'p', ARGV[1], 'n', n)
return seq
`)

func (r *redisBackend) setClients(ctx context.Context, domain, table string, fields, plans []string, maxPlans int) (int64, error) {
	h, s, x, p := r.clientKeys(domain, table)
	var payload []byte
	args := make([]any, 0, 3+2*len(fields))
	for i := range fields {
		payload = appendChange(payload, fields[i], plans[i])
	}
	args = append(args, payload, ClientLogChanges, maxPlans)
	for i := range fields {
		args = append(args, fields[i], plans[i])
	}
	seq, err := setClientsScript.Run(ctx, r.c, []string{h, s, x, p}, args...).Int64()
	if err != nil {
		return 0, err
	}
	if seq < 0 {
		return 0, &InputError{"changes", fmt.Sprintf("table %q would name %d plans, more than %d", table, -seq, maxPlans)}
	}
	return seq, nil
}

func (r *redisBackend) clientPlan(ctx context.Context, domain, table, field string) (string, bool, error) {
	h, _, _, _ := r.clientKeys(domain, table)
	p, err := r.c.HGet(ctx, h, field).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return p, err == nil, err
}

func (r *redisBackend) scanClients(ctx context.Context, domain, table string, fn func(field, plan string) error) (int64, error) {
	h, s, _, _ := r.clientKeys(domain, table)
	seq, err := r.c.Get(ctx, s).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	var cursor uint64
	for {
		kv, next, err := r.c.HScan(ctx, h, cursor, "", 10000).Result()
		if err != nil {
			return 0, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if err := fn(kv[i], kv[i+1]); err != nil {
				return 0, err
			}
		}
		if cursor = next; cursor == 0 {
			return seq, nil
		}
	}
}

func (r *redisBackend) clientLog(ctx context.Context, domain, table string, after int64, wait time.Duration) ([]rawBatch, error) {
	_, s, x, _ := r.clientKeys(domain, table)
	from := strconv.FormatInt(after, 10) + "-0"
	var msgs []redis.XMessage
	if wait > 0 {
		res, err := r.c.XRead(ctx, &redis.XReadArgs{Streams: []string{x, from}, Count: 1000, Block: wait}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if len(res) > 0 {
			msgs = res[0].Messages
		}
	}
	if len(msgs) == 0 {
		// nothing new in the log: is there nothing new at all, or was
		// the log trimmed past after?
		seq, err := r.c.Get(ctx, s).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if seq <= after {
			return nil, nil
		}
		if msgs, err = r.c.XRangeN(ctx, x, "("+from, "+", 1000).Result(); err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			return nil, ErrClientLogGap
		}
	}
	out := make([]rawBatch, 0, len(msgs))
	for _, m := range msgs {
		seqPart, _, _ := strings.Cut(m.ID, "-")
		seq, err1 := strconv.ParseInt(seqPart, 10, 64)
		n, err2 := strconv.ParseInt(fmt.Sprint(m.Values["n"]), 10, 64)
		payload, ok := m.Values["p"].(string)
		if err1 != nil || err2 != nil || !ok || n < 1 || n > seq {
			return nil, fmt.Errorf("%s: entry %s is not a batch of changes", x, m.ID)
		}
		out = append(out, rawBatch{prev: seq - n, seq: seq, payload: []byte(payload)})
	}
	return out, nil
}

func (r *redisBackend) tableInfo(ctx context.Context, domain, table string) (int64, int64, []string, error) {
	h, s, _, p := r.clientKeys(domain, table)
	var seqCmd *redis.StringCmd
	var nCmd *redis.IntCmd
	var plansCmd *redis.StringSliceCmd
	_, err := r.c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		seqCmd, nCmd, plansCmd = pl.Get(ctx, s), pl.HLen(ctx, h), pl.HKeys(ctx, p)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, nil, err
	}
	seq, err := seqCmd.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, nil, err
	}
	return seq, nCmd.Val(), plansCmd.Val(), nil
}
