package checker

import (
	"hash/maphash"
	"sync"
)

// idempotency remembers whole decisions by (domain, request id) for a TTL,
// so a retried request gets the first answer and is charged once. Bounded:
// when a shard is full, expired ids go first, then arbitrary ones.
type idempotency struct {
	ttl    int64
	max    int
	seed   maphash.Seed
	shards [16]idemShard
}

type idemShard struct {
	mu sync.Mutex
	m  map[idemKey]idemEntry
}

type idemKey struct{ domain, id string }

type idemEntry struct {
	code     Code
	statuses []Status
	expires  int64
}

func newIdempotency(ttl int64, maxIDs int) *idempotency {
	c := &idempotency{ttl: ttl, max: max(maxIDs/16, 1), seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = map[idemKey]idemEntry{}
	}
	return c
}

func (c *idempotency) shard(domain, id string) *idemShard {
	return &c.shards[maphash.String(c.seed, id)%16]
}

// get copies a remembered decision into d.
func (c *idempotency) get(domain, id string, now int64, d *Decision) bool {
	sh := c.shard(domain, id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[idemKey{domain, id}]
	if !ok || e.expires <= now {
		return false
	}
	d.Code = e.code
	d.Statuses = append(d.Statuses[:0], e.statuses...)
	return true
}

func (c *idempotency) put(domain, id string, now int64, d *Decision) {
	sh := c.shard(domain, id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) >= c.max {
		for k, v := range sh.m {
			if v.expires <= now {
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
	sh.m[idemKey{domain, id}] = idemEntry{code: d.Code, statuses: append([]Status(nil), d.Statuses...), expires: now + c.ttl}
}
