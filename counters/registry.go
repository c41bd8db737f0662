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
}

// heartbeat lists the caller until now + ttl, drops instances past their
// time, and answers {live, seconds, microseconds} of the server's clock.
// KEYS[1] the registry (a sorted set: instance → expiry, µs);
// ARGV: instance, ttl ms.
var heartbeat = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]) * 1000, ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 10)
return {redis.call('ZCARD', KEYS[1]), tonumber(t[1]), tonumber(t[2])}
`)

func (r *Redis) registryKey() string { return r.prefix + ":{reg}:instances" }

// Heartbeat implements Registry: one script on the registry's slot, on
// the Redis server's clock.
func (r *Redis) Heartbeat(ctx context.Context, instance string, ttl time.Duration) (Beat, error) {
	res, err := heartbeat.Run(ctx, r.c, []string{r.registryKey()}, instance, max(ttl.Milliseconds(), 1)).Result()
	if err != nil {
		return Beat{}, unavailable("heartbeat", err)
	}
	v, err := ints(res)
	if err != nil || len(v) != 3 {
		return Beat{}, fmt.Errorf("counters: heartbeat answered %v: %v", res, err)
	}
	now := v[1]*int64(time.Second) + v[2]*int64(time.Microsecond)
	if r.pin != nil {
		now = r.pin()
	}
	return Beat{Live: int(v[0]), Now: now}, nil
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
	return Beat{Live: len(s.instances), Now: now}, nil
}
