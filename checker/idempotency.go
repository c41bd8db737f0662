package checker

import (
	"hash/maphash"
	"sync"
)

// idempotency remembers whole decisions by (domain, request id) for a TTL,
// so a retried request gets the first answer and is charged once. Each id
// is bound to its request by a fingerprint: the same id with another
// request (other descriptors, hits or limit overrides) is refused with
// [ErrRequestIDConflict] rather than answered with someone else's
// decision. Bounded: when a shard is full, expired ids go first, then
// arbitrary ones.
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
	fp       uint64 // fingerprint of the request that stored it
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

func (c *idempotency) shard(_, id string) *idemShard {
	return &c.shards[maphash.String(c.seed, id)%16]
}

// fingerprint hashes everything that makes req the request it is, with a
// per-process random seed (so a client cannot craft a colliding request).
func (c *idempotency) fingerprint(req *Request) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(req.Domain)
	h.WriteByte(0)
	var num [8]byte
	writeInt := func(v int64) {
		for i := range num {
			num[i] = byte(v >> (8 * i))
		}
		h.Write(num[:])
	}
	writeInt(req.Hits)
	writeInt(int64(len(req.Descriptors)))
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		writeInt(int64(len(d.Entries)))
		for _, e := range d.Entries {
			writeInt(int64(len(e.Key)))
			h.WriteString(e.Key)
			writeInt(int64(len(e.Value)))
			h.WriteString(e.Value)
		}
		if d.HasHits {
			h.WriteByte(1)
			writeInt(d.Hits)
		} else {
			h.WriteByte(0)
		}
		if d.Rule != nil { // a limit override: its id carries limit, unit and multiplier
			h.WriteByte(1)
			h.WriteString(d.Rule.ID)
		} else {
			h.WriteByte(0)
		}
	}
	return h.Sum64()
}

// get copies a remembered decision for (domain, id) into d when fp is the
// request that stored it. It reports whether an unexpired answer exists
// and whether it belongs to another request (a conflict; d is untouched).
func (c *idempotency) get(domain, id string, fp uint64, now int64, d *Decision) (found, conflict bool) {
	sh := c.shard(domain, id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[idemKey{domain, id}]
	if !ok || e.expires <= now {
		return false, false
	}
	if e.fp != fp {
		return true, true
	}
	d.Code = e.code
	d.Statuses = append(d.Statuses[:0], e.statuses...)
	return true, false
}

func (c *idempotency) put(domain, id string, fp uint64, now int64, d *Decision) {
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
	sh.m[idemKey{domain, id}] = idemEntry{fp: fp, code: d.Code, statuses: append([]Status(nil), d.Statuses...), expires: now + c.ttl}
}

// replay looks req up when it carries a request id (c may be nil: no
// idempotency). It returns the request's fingerprint for remember, and
// either fills d with the remembered answer (done), or refuses a
// different request under the same id (errRequestIDConflict).
func (c *idempotency) replay(req *Request, now int64, d *Decision) (fp uint64, done bool, err error) {
	if c == nil || req.RequestID == "" {
		return 0, false, nil
	}
	fp = c.fingerprint(req)
	found, conflict := c.get(req.Domain, req.RequestID, fp, now, d)
	if conflict {
		return fp, false, errRequestIDConflict
	}
	return fp, found, nil
}

// remember stores d as the answer to req (fp from replay); a no-op
// without a request id or idempotency.
func (c *idempotency) remember(req *Request, fp uint64, now int64, d *Decision) {
	if c != nil && req.RequestID != "" {
		c.put(req.Domain, req.RequestID, fp, now, d)
	}
}
