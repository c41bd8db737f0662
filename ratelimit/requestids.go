package ratelimit

import (
	"hash/maphash"
	"time"

	"github.com/velvetrope/velvetrope/internal/idem"
)

// RequestIDs remembers whole decisions by (domain, request id) for a TTL,
// so a retried request gets the first answer and is charged once. Each id
// is bound to its request by a fingerprint: the same id with another
// request (other descriptors, hits or limit overrides) is refused with
// [ErrRequestIDConflict] rather than answered with someone else's
// decision. Both engines use it; a nil *RequestIDs remembers nothing.
// Safe for concurrent use.
type RequestIDs struct {
	cache *idem.Cache[answered]
}

// answered is a remembered decision.
type answered struct {
	code     Code
	statuses []Status
}

// NewRequestIDs returns a memory of at most maxIDs request ids, each kept
// for ttl.
func NewRequestIDs(ttl time.Duration, maxIDs int) *RequestIDs {
	return &RequestIDs{cache: idem.New[answered](int64(ttl), maxIDs)}
}

// fingerprint hashes everything that makes req the request it is, with a
// per-process random seed (so a client cannot craft a colliding request).
func (c *RequestIDs) fingerprint(req *Request) uint64 {
	var h maphash.Hash
	h.SetSeed(c.cache.Seed())
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

// Replay looks req up when it carries a request id. It returns the
// request's fingerprint for [RequestIDs.Remember], and either fills d with
// the remembered answer (done), or refuses a different request under the
// same id (a *[FieldError] wrapping [ErrRequestIDConflict]).
func (c *RequestIDs) Replay(req *Request, now int64, d *Decision) (fp uint64, done bool, err error) {
	if c == nil || req.RequestID == "" {
		return 0, false, nil
	}
	fp = c.fingerprint(req)
	a, found, conflict := c.cache.Get(req.Domain, req.RequestID, fp, now)
	switch {
	case conflict:
		return fp, false, errRequestIDConflict
	case found:
		d.Code = a.code
		d.Statuses = append(d.Statuses[:0], a.statuses...)
	}
	return fp, found, nil
}

// Remember stores d as the answer to req (fp from Replay); a no-op
// without a request id.
func (c *RequestIDs) Remember(req *Request, fp uint64, now int64, d *Decision) {
	if c != nil && req.RequestID != "" {
		c.cache.Put(req.Domain, req.RequestID, fp, now, answered{d.Code, append([]Status(nil), d.Statuses...)})
	}
}
