package ratelimit

import (
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/config"

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

// answered is a remembered decision, and the descriptors it decided (a
// charge naming the check's id charges them).
type answered struct {
	code     Code
	statuses []Status
	descs    []Descriptor
}

// chargeScope keeps charges' ids apart from checks': a charge may reuse
// the id of the check it follows. No domain starts with a NUL byte.
const chargeScope = "\x00charge\x00"

// scope is the id memory's scope of req.
func scope(req *Request) string {
	if req.Charge {
		return chargeScope + req.Domain
	}
	return req.Domain
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
	if req.Charge {
		h.WriteByte(1)
	}
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
// same id (a *[FieldError] wrapping [ErrRequestIDConflict]). Otherwise the
// id is claimed: the caller decides and Remembers, or Abandons on an
// error. The same request arriving meanwhile waits for that answer (up to
// [MaxIDWait], then it is refused: [ErrRequestIDInFlight]), so concurrent
// retries are decided once.
func (c *RequestIDs) Replay(req *Request, now int64, d *Decision) (fp uint64, done bool, err error) {
	if c == nil || req.RequestID == "" {
		return 0, false, nil
	}
	fp = c.fingerprint(req)
	var timeout <-chan time.Time
	for {
		a, found, conflict, wait := c.cache.Claim(scope(req), req.RequestID, fp, now)
		switch {
		case conflict:
			return fp, false, errRequestIDConflict
		case found:
			d.Code = a.code
			d.Statuses = append(d.Statuses[:0], a.statuses...)
			return fp, true, nil
		case wait == nil:
			return fp, false, nil // claimed: ours to decide
		}
		if timeout == nil {
			timeout = time.After(MaxIDWait)
		}
		select {
		case <-wait: // decided (ask again: its answer) or given up (ask again: ours to claim)
		case <-timeout:
			return fp, false, errRequestIDInFlight
		}
	}
}

// MaxIDWait bounds how long a request waits for the answer of the same
// request (same id) being decided.
const MaxIDWait = 5 * time.Second

// Abandon gives up the claim Replay made for req (its fingerprint fp):
// the decision failed, nothing is remembered.
func (c *RequestIDs) Abandon(req *Request, fp uint64) {
	if c != nil && req.RequestID != "" {
		c.cache.Abandon(scope(req), req.RequestID, fp)
	}
}

// Remember stores d as the answer to req (fp from Replay); a no-op
// without a request id. A check's descriptors are kept too (copied: they
// may alias the caller's buffer), for a charge that names its id.
func (c *RequestIDs) Remember(req *Request, fp uint64, now int64, d *Decision) {
	if c == nil || req.RequestID == "" {
		return
	}
	a := answered{code: d.Code, statuses: append([]Status(nil), d.Statuses...)}
	if !req.Charge {
		a.descs = cloneDescriptors(req.Descriptors)
	}
	c.cache.Put(scope(req), req.RequestID, fp, now, a)
}

// Recall fills the descriptors of a charge that has none from the check
// decided under its request id (within the TTL): the check's entries and
// limit overrides, charged at the charge's hits. It reports a
// *[FieldError] naming request_id when no such check is remembered.
func (c *RequestIDs) Recall(req *Request, now int64) error {
	if !req.Charge || len(req.Descriptors) > 0 || req.RequestID == "" {
		return nil
	}
	var a answered
	found := false
	if c != nil {
		a, found = c.cache.Peek(req.Domain, req.RequestID, now)
	}
	if !found || len(a.descs) == 0 {
		return &FieldError{"request_id", fmt.Errorf("%w: no check with request id %q in domain %q is remembered here "+
			"(checks are remembered for the idempotency TTL by the checker that decided them); send the descriptors",
			ErrBadRequest, req.RequestID, req.Domain)}
	}
	req.Descriptors = make([]Descriptor, len(a.descs))
	for i, d := range a.descs {
		req.Descriptors[i] = Descriptor{Entries: d.Entries, Rule: d.Rule} // the charge's hits, not the check's
	}
	return nil
}

// cloneDescriptors copies ds with strings of their own.
func cloneDescriptors(ds []Descriptor) []Descriptor {
	out := make([]Descriptor, len(ds))
	for i, d := range ds {
		es := make([]config.Entry, len(d.Entries))
		for j, e := range d.Entries {
			es[j] = config.Entry{Key: strings.Clone(e.Key), Value: strings.Clone(e.Value)}
		}
		out[i] = Descriptor{Entries: es, Hits: d.Hits, HasHits: d.HasHits, Rule: d.Rule}
	}
	return out
}
