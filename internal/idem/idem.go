// Package idem remembers answers by (scope, id) for a time, each bound to
// the fingerprint of the request that produced it: the one memory behind
// request-id idempotency, of the engines (ratelimit.RequestIDs, scoped by
// domain) and of limiter.Keyed (scoped by counter key, without
// fingerprints).
package idem

import (
	"hash/maphash"
	"sync"
)

// Cache remembers values of type V by (scope, id) for ttl nanoseconds. At
// most maxIDs are kept: when a shard is full, expired ids go first, then
// arbitrary ones. Safe for concurrent use.
type Cache[V any] struct {
	ttl    int64
	max    int
	seed   maphash.Seed
	shards [16]shard[V]
}

type shard[V any] struct {
	mu sync.Mutex
	m  map[key]entry[V]
}

type key struct{ scope, id string }

type entry[V any] struct {
	fp      uint64 // fingerprint of the request that stored it
	v       V
	expires int64
}

// New returns a cache of ttl nanoseconds and at most maxIDs ids.
func New[V any](ttl int64, maxIDs int) *Cache[V] {
	c := &Cache[V]{ttl: ttl, seed: maphash.MakeSeed()}
	c.max = max(maxIDs/len(c.shards), 1)
	for i := range c.shards {
		c.shards[i].m = map[key]entry[V]{}
	}
	return c
}

// Seed is the cache's random seed, for fingerprints that a client cannot
// make collide.
func (c *Cache[V]) Seed() maphash.Seed { return c.seed }

func (c *Cache[V]) shard(id string) *shard[V] {
	return &c.shards[maphash.String(c.seed, id)%uint64(len(c.shards))]
}

// Get returns the value stored for (scope, id) unless it expired by now.
// conflict says one is stored but for another fingerprint: the id was
// used by a different request.
func (c *Cache[V]) Get(scope, id string, fp uint64, now int64) (v V, found, conflict bool) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key{scope, id}]
	if !ok || e.expires <= now {
		return v, false, false
	}
	if e.fp != fp {
		return v, true, true
	}
	return e.v, true, false
}

// Peek returns the value stored for (scope, id) unless it expired by
// now, whatever request it was stored for.
func (c *Cache[V]) Peek(scope, id string, now int64) (v V, found bool) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key{scope, id}]
	if !ok || e.expires <= now {
		return v, false
	}
	return e.v, true
}

// Put stores v for (scope, id) and the request fingerprint fp until now +
// ttl.
func (c *Cache[V]) Put(scope, id string, fp uint64, now int64, v V) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) >= c.max {
		for k, e := range sh.m {
			if e.expires <= now {
				delete(sh.m, k)
			}
		}
		for k := range sh.m {
			if len(sh.m) < c.max {
				break
			}
			delete(sh.m, k)
		}
	}
	sh.m[key{scope, id}] = entry[V]{fp: fp, v: v, expires: now + c.ttl}
}

// Sweep removes every id expired by now, one shard at a time: the memory
// of ids nobody retries comes back before the bound forces it.
func (c *Cache[V]) Sweep(now int64) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= now {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
}

// Len returns the number of ids held, expired ones not yet removed
// included.
func (c *Cache[V]) Len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
