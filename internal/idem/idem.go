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
	// pending is set while the id is claimed (Claim) and its answer is
	// being made; closed when it is stored or given up.
	pending chan struct{}
}

// drop removes k, waking whoever waits on its claim.
func (sh *shard[V]) drop(k key) {
	if p := sh.m[k].pending; p != nil {
		close(p)
	}
	delete(sh.m, k)
}

// room makes room for one more id (requires sh.mu): expired ids first,
// then arbitrary ones.
func (sh *shard[V]) room(limit int, now int64) {
	if len(sh.m) < limit {
		return
	}
	for k, e := range sh.m {
		if e.expires <= now {
			sh.drop(k)
		}
	}
	for k := range sh.m {
		if len(sh.m) < limit {
			break
		}
		sh.drop(k)
	}
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
	if !ok || e.expires <= now || e.pending != nil && e.fp == fp {
		return v, false, false
	}
	if e.fp != fp {
		return v, true, true
	}
	return e.v, true, false
}

// Claim is Get that, when no live answer is stored for (scope, id), claims
// the id for fp (until now + ttl): the caller makes the answer and Puts it,
// or gives the claim up (Abandon). A claim of the same request by another
// caller is returned as wait, closed once its answer is stored or given
// up: then ask again. So two concurrent requests with one id are decided
// once.
func (c *Cache[V]) Claim(scope, id string, fp uint64, now int64) (v V, found, conflict bool, wait <-chan struct{}) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := key{scope, id}
	if e, ok := sh.m[k]; ok && e.expires > now {
		switch {
		case e.fp != fp:
			return v, true, true, nil
		case e.pending != nil:
			return v, false, false, e.pending
		}
		return e.v, true, false, nil
	}
	sh.drop(k)
	sh.room(c.max, now)
	sh.m[k] = entry[V]{fp: fp, expires: now + c.ttl, pending: make(chan struct{})}
	return v, false, false, nil
}

// Abandon gives up fp's claim of (scope, id): no answer is stored, and a
// request waiting on it asks again.
func (c *Cache[V]) Abandon(scope, id string, fp uint64) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[key{scope, id}]; ok && e.pending != nil && e.fp == fp {
		sh.drop(key{scope, id})
	}
}

// Peek returns the value stored for (scope, id) unless it expired by
// now, whatever request it was stored for.
func (c *Cache[V]) Peek(scope, id string, now int64) (v V, found bool) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key{scope, id}]
	if !ok || e.expires <= now || e.pending != nil {
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
	k := key{scope, id}
	if e, ok := sh.m[k]; ok && e.pending != nil { // the claim's answer: its waiters ask again
		close(e.pending)
		delete(sh.m, k)
	}
	sh.room(c.max, now)
	sh.m[k] = entry[V]{fp: fp, v: v, expires: now + c.ttl}
}

// Sweep removes every id expired by now, one shard at a time: the memory
// of ids nobody retries comes back before the bound forces it.
func (c *Cache[V]) Sweep(now int64) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= now {
				sh.drop(k)
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
