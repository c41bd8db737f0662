// Package valuehash replaces request values by a keyed hash before they
// become counter identities (rules with hash_values), so that they never
// leave the checker: not in Kafka deltas, Redis keys, ClickHouse rows,
// logs or metrics.
package valuehash

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Hasher hashes values under one key. Instances that share counters must
// share the key; without one a random key is drawn per process (exact
// within it, not shared: Random says so).
type Hasher struct {
	key    []byte
	random bool
	macs   sync.Pool // hash.Hash
}

// New returns a Hasher keyed by key (empty: a random key).
func New(key []byte) (*Hasher, error) {
	h := &Hasher{key: key}
	if len(key) == 0 {
		h.key, h.random = make([]byte, 32), true
		if _, err := rand.Read(h.key); err != nil {
			return nil, err
		}
	}
	h.macs.New = func() any { return hmac.New(sha256.New, h.key) }
	return h, nil
}

// Random says the key was drawn at random: the hashes are this process's
// alone.
func (h *Hasher) Random() bool { return h.random }

// Value hashes one value of key in domain: 16 bytes of HMAC-SHA256, in
// hex. Domain and key are part of the input, so equal values of
// different keys do not share a hash (they are the rules' names, which
// hold no 0 byte: the value, last, cannot shift them).
func (h *Hasher) Value(domain, key, value string) string {
	m := h.macs.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(domain))
	m.Write([]byte{0})
	m.Write([]byte(key))
	m.Write([]byte{0})
	m.Write([]byte(value))
	var sum [sha256.Size]byte
	out := hex.EncodeToString(m.Sum(sum[:0])[:16])
	h.macs.Put(m)
	return out
}

// Hashed returns req with the values its rules in rs hash replaced (req
// itself when none does, when it is prehashed, its domain unknown or its
// descriptors too many to match).
func (h *Hasher) Hashed(rs *config.RuleSet, req *ratelimit.Request) *ratelimit.Request {
	dom, known := rs.Lookup(req.Domain)
	if !known || req.Prehashed || len(req.Descriptors) > config.MaxDescriptors {
		return req
	}
	var buf [config.MaxDescriptors]*config.Rule
	return h.Request(req, req.Match(dom, buf[:len(req.Descriptors)]))
}

// Request returns req with the values its rules hash replaced (rules[i]
// is descriptor i's, nil for none), as a copy: the caller's request is not
// modified. It returns req itself when no rule hashes.
func (h *Hasher) Request(req *ratelimit.Request, rules []*config.Rule) *ratelimit.Request {
	need := false
	for _, r := range rules {
		need = need || r != nil && r.Hashed != nil
	}
	if !need {
		return req
	}
	cp := *req
	cp.Descriptors = append([]ratelimit.Descriptor(nil), req.Descriptors...)
	for i, r := range rules {
		if r == nil || r.Hashed == nil {
			continue
		}
		es := append([]config.Entry(nil), cp.Descriptors[i].Entries...)
		for j := range es {
			if j < len(r.Hashed) && r.Hashed[j] {
				es[j].Value = h.Value(req.Domain, es[j].Key, es[j].Value)
			}
		}
		cp.Descriptors[i].Entries = es
	}
	return &cp
}
