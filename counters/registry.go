package counters

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Registry is the counter store's list of live checker instances: every
// checker heartbeats to it, each heartbeat keeps the instance listed for
// ttl, and the answer says how many are live and what time the store's
// clock reads (the checker measures its own clock's skew against it).
type Registry interface {
	Heartbeat(ctx context.Context, instance string, ttl time.Duration) (Beat, error)
}

// Beat is a heartbeat's answer.
type Beat struct {
	Live int   // instances whose last heartbeat is younger than its ttl, the caller included
	Now  int64 // the store's clock, unix ns
	// Members are the live instances' ids, the caller's included, in no
	// particular order: a charge reserves the others' first-touch
	// allowances by them.
	Members []string
}

// heartbeat lists the caller until now + ttl, drops instances past their
// time, and answers {live, seconds, microseconds} of the server's clock
// followed by the live instances.
// KEYS[1] the registry (a sorted set: instance → expiry, µs);
// ARGV: instance, ttl ms.
var heartbeat = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]) * 1000, ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 10)
local out = {redis.call('ZCARD', KEYS[1]), tonumber(t[1]), tonumber(t[2])}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do out[#out + 1] = m end
return out
`)

func (r *Redis) registryKey() string { return r.prefix + ":{reg}:instances" }

// Heartbeat implements Registry: one script on the registry's slot, on
// the Redis server's clock.
func (r *Redis) Heartbeat(ctx context.Context, instance string, ttl time.Duration) (Beat, error) {
	res, err := heartbeat.Run(ctx, r.c, []string{r.registryKey()}, instance, max(ttl.Milliseconds(), 1)).Result()
	if err != nil {
		return Beat{}, unavailable("heartbeat", err)
	}
	arr, _ := res.([]any)
	if len(arr) < 3 {
		return Beat{}, fmt.Errorf("counters: heartbeat answered %v", res)
	}
	v, err := ints(arr[:3])
	if err != nil {
		return Beat{}, fmt.Errorf("counters: heartbeat answered %v: %v", res, err)
	}
	members := make([]string, 0, len(arr)-3)
	for _, m := range arr[3:] {
		s, ok := m.(string)
		if !ok {
			return Beat{}, fmt.Errorf("counters: heartbeat answered member %v (%T)", m, m)
		}
		members = append(members, s)
	}
	now := v[1]*int64(time.Second) + v[2]*int64(time.Microsecond)
	if r.pin != nil {
		now = r.pin()
	}
	return Beat{Live: int(v[0]), Now: now, Members: members}, nil
}

// Heartbeat implements Registry on the store's clock (SetClock).
func (s *MemStore) Heartbeat(_ context.Context, instance string, ttl time.Duration) (Beat, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.instances == nil {
		s.instances = map[string]int64{}
	}
	for k, exp := range s.instances {
		if exp <= now {
			delete(s.instances, k)
		}
	}
	s.instances[instance] = now + int64(ttl)
	members := make([]string, 0, len(s.instances))
	for k := range s.instances {
		members = append(members, k)
	}
	return Beat{Live: len(s.instances), Now: now, Members: members}, nil
}
