package counters

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leases are a concurrency rule's counters (config.AlgConcurrency): each
// admitted request holds a lease, a member of the counter's set scored by
// its expiry, until it is released or its TTL ends. An acquire is a sync
// decision (ChargeSync with the lease to add in SyncRequest.Lease); a
// refund releases the lease the answer's token names. Every lease is also
// in its rule's set, so the fleet's leases in flight per rule are one
// count (InFlight).
type Leases interface {
	// ReleaseLease releases lease of q's counter (q.Key, q.Rule); "" the
	// counter's oldest lease (Envoy's is_negative_hits names no lease).
	// released is false when there was no such lease (released or expired
	// already).
	ReleaseLease(ctx context.Context, q *SyncRequest, lease string) (released bool, err error)
	// InFlight is the number of leases held, per rule id of rules.
	InFlight(ctx context.Context, rules []string) (map[string]int64, error)
}

// leaseKeys are a lease counter's set and its rule's set, in the rule's
// hash tag: an acquire and a release touch both atomically, so the
// rule's count is exact (a rule's leases share one Redis Cluster slot).
func (r *Redis) leaseKeys(q *SyncRequest) (counter, rule string) {
	tag := r.key("l:"+q.Rule, "", 0, false) // prefix:{hash}:l:<rule>
	at := strings.Index(tag, "}:") + 2
	return tag[:at] + q.Key + ":l", tag[:at] + "n"
}

// syncLease acquires a lease. KEYS[1] the counter's leases, KEYS[2] the
// rule's, KEYS[3] the request id. ARGV: now µs or 0, id TTL ms, limit,
// lease TTL µs, cost, lease. A request holds one lease whatever its cost;
// cost 0 asks without taking one. The reset is when the oldest lease
// expires; a refusal retries then or within a second, whichever is
// sooner (leases are usually released long before they expire).
var syncLease = redis.NewScript(syncPrologue + `
local limit, ttl, cost, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local nowms = math.floor(now / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', nowms)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', nowms)
local n = redis.call('ZCARD', KEYS[1])
local allowed, token = n < limit, ''
if allowed and cost > 0 then
  local exp = nowms + math.ceil(ttl / 1000)
  redis.call('ZADD', KEYS[1], exp, lease)
  redis.call('ZADD', KEYS[2], exp, lease)
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1000)
  local keep = redis.call('PTTL', KEYS[2])
  if keep < math.ceil(ttl / 1000) + 1000 then redis.call('PEXPIRE', KEYS[2], math.ceil(ttl / 1000) + 1000) end
  n, token = n + 1, lease
end
local reset, retry = 0, 0
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #oldest == 2 then reset = math.max(0, tonumber(oldest[2]) - nowms) * 1000 end
if not allowed then retry = math.max(1000, math.min(reset, 1000000)) end
return done({allowed and 1 or 0, math.max(0, limit - n), reset, retry, token})
`)

// releaseLease releases a lease. KEYS[1] the counter's leases, KEYS[2]
// the rule's. ARGV[1] the lease (” the oldest), ARGV[2] now ms or 0 (the
// server's TIME; pinned in tests only). Returns 1 if one was held.
var releaseLease = redis.NewScript(`
local nowms = tonumber(ARGV[2])
if nowms == 0 then
  local t = redis.call('TIME')
  nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', nowms)
local m = ARGV[1]
if m == '' then
  local p = redis.call('ZPOPMIN', KEYS[1])
  if #p == 0 then return 0 end
  m = p[1]
elseif redis.call('ZREM', KEYS[1], m) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], m)
return 1
`)

// resetLeases drops every lease of a counter. KEYS[1] the counter's
// leases, KEYS[2] the rule's.
var resetLeases = redis.NewScript(`
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do redis.call('ZREM', KEYS[2], m) end
redis.call('DEL', KEYS[1])
return 1
`)

// ReleaseLease implements [Leases].
func (r *Redis) ReleaseLease(ctx context.Context, q *SyncRequest, lease string) (bool, error) {
	counter, rule := r.leaseKeys(q)
	now := q.Now
	if now == 0 && r.pin != nil {
		now = r.pin()
	}
	n, err := releaseLease.Run(ctx, r.c, []string{counter, rule}, lease, now/int64(time.Millisecond)).Int64()
	if err != nil {
		return false, unavailable("release lease", err)
	}
	return n == 1, nil
}

// InFlight implements [Leases]: one ZCOUNT per rule, pipelined.
func (r *Redis) InFlight(ctx context.Context, rules []string) (map[string]int64, error) {
	at := time.Now().UnixNano() // the checker's clock is kept within max_clock_skew of the store's
	if r.pin != nil {
		at = r.pin()
	}
	now := strconv.FormatInt(at/int64(time.Millisecond), 10)
	cmds := make([]*redis.IntCmd, len(rules))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range rules {
			_, rule := r.leaseKeys(&SyncRequest{Rule: id})
			cmds[i] = p.ZCount(ctx, rule, "("+now, "+inf")
		}
		return nil
	})
	if err != nil {
		return nil, unavailable("leases in flight", err)
	}
	out := make(map[string]int64, len(rules))
	for i, id := range rules {
		out[id] = cmds[i].Val()
	}
	return out, nil
}

// memLeases is MemStore's leases: counter key → lease → expiry (ns), and
// rule id → lease → expiry.
type memLeases struct {
	mu       sync.Mutex
	counters map[string]map[string]int64
	rules    map[string]map[string]int64
	ids      map[string]idAnswer // idempotent acquires: request id key → answer
}

// idAnswer is an idempotent acquire's answer, kept until expires.
type idAnswer struct {
	res     SyncResult
	expires int64
}

// maxLeaseIDs bounds the request ids the in-memory leases remember.
const maxLeaseIDs = 1 << 16

func purge(set map[string]int64, now int64) {
	for m, exp := range set {
		if exp <= now {
			delete(set, m)
		}
	}
}

// acquire runs syncLease's decision in memory.
func (l *memLeases) acquire(q *SyncRequest, now int64) SyncResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counters == nil {
		l.counters, l.rules, l.ids = map[string]map[string]int64{}, map[string]map[string]int64{}, map[string]idAnswer{}
	}
	idKey := ""
	if q.RequestID != "" {
		idKey = q.Key + "\x00" + q.IdempotencyKey()
		if a, ok := l.ids[idKey]; ok && a.expires > now {
			return a.res
		}
	}
	set, rule := l.counters[q.Key], l.rules[q.Rule]
	if set == nil {
		set = map[string]int64{}
		l.counters[q.Key] = set
	}
	if rule == nil {
		rule = map[string]int64{}
		l.rules[q.Rule] = rule
	}
	purge(set, now)
	purge(rule, now)
	n := int64(len(set))
	res := SyncResult{Allowed: n < q.Limit}
	if res.Allowed && q.Cost > 0 {
		exp := now + q.Window
		set[q.Lease], rule[q.Lease] = exp, exp
		n++
		res.Token = q.Lease
	}
	res.Remaining = max(0, q.Limit-n)
	oldest := int64(0)
	for _, exp := range set {
		if oldest == 0 || exp < oldest {
			oldest = exp
		}
	}
	if oldest > 0 {
		res.ResetAfter = time.Duration(oldest - now)
	}
	if !res.Allowed {
		res.RetryAfter = max(time.Millisecond, min(res.ResetAfter, time.Second))
	}
	if idKey != "" {
		if len(l.ids) >= maxLeaseIDs {
			for k, a := range l.ids {
				if a.expires <= now || len(l.ids) >= maxLeaseIDs {
					delete(l.ids, k)
				}
			}
		}
		l.ids[idKey] = idAnswer{res, now + int64(q.IdempotencyTTL)}
	}
	return res
}

func (l *memLeases) release(q *SyncRequest, lease string, now int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.counters[q.Key]
	if set == nil {
		return false
	}
	purge(set, now)
	if lease == "" {
		oldest := int64(0)
		for m, exp := range set {
			if oldest == 0 || exp < oldest || exp == oldest && m < lease {
				oldest, lease = exp, m
			}
		}
		if lease == "" {
			return false
		}
	}
	if _, ok := set[lease]; !ok {
		return false
	}
	delete(set, lease)
	delete(l.rules[q.Rule], lease)
	return true
}

// reset drops every lease of q's counter.
func (l *memLeases) reset(q *SyncRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for m := range l.counters[q.Key] {
		delete(l.rules[q.Rule], m)
	}
	delete(l.counters, q.Key)
}

// ReleaseLease implements [Leases].
func (s *MemStore) ReleaseLease(_ context.Context, q *SyncRequest, lease string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	return s.leases.release(q, lease, s.now()), nil
}

// InFlight implements [Leases].
func (s *MemStore) InFlight(_ context.Context, rules []string) (map[string]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	now := s.now()
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	out := make(map[string]int64, len(rules))
	for _, id := range rules {
		set := s.leases.rules[id]
		purge(set, now)
		out[id] = int64(len(set))
	}
	return out, nil
}

// checkLease refuses a lease acquire the store cannot run.
func checkLease(q *SyncRequest) error {
	switch {
	case q.Rule == "":
		return fmt.Errorf("counters: lease of %q: no rule", q.Key)
	case q.Cost > 0 && q.Lease == "":
		return fmt.Errorf("counters: lease of %q: no lease id", q.Key)
	case q.Window < int64(time.Millisecond):
		return fmt.Errorf("counters: lease of %q: a TTL under 1 ms", q.Key)
	}
	return nil
}
