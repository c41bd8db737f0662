package checker

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

// hashing replaces the values of hash_values keys by a keyed hash before
// they become counter identities, so they never leave the checker: not in
// Kafka deltas, Redis keys, ClickHouse rows, logs or metrics. Instances
// that share counters must share the key; without one a random key is
// drawn per process (exact within it, not shared: logged).
type hashing struct {
	key     []byte
	random  bool
	macs    sync.Pool // hash.Hash
	onceLog sync.Once
}

func newHashing(key []byte) (*hashing, error) {
	h := &hashing{key: key}
	if len(key) == 0 {
		h.key, h.random = make([]byte, 32), true
		if _, err := rand.Read(h.key); err != nil {
			return nil, err
		}
	}
	h.macs.New = func() any { return hmac.New(sha256.New, h.key) }
	return h, nil
}

// value hashes one value of key in domain: 16 bytes of HMAC-SHA256, hex.
// Domain and key are part of the input, so equal values of different keys
// do not share a hash.
func (h *hashing) value(domain, key, value string) string {
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

// Hashed returns req with the values of hash_values rules replaced by
// their keyed hashes, as the checker counts them (req itself when no rule
// of it hashes): what may leave the process, e.g. a deferred request on
// its topic. Descriptors that match no rule, or an unknown domain, are
// left as they are.
func (c *Checker) Hashed(req *ratelimit.Request) *ratelimit.Request {
	dom, known := c.rules.Load().Lookup(req.Domain)
	if !known || req.Prehashed || len(req.Descriptors) > config.MaxDescriptors {
		return req
	}
	var buf [config.MaxDescriptors]*config.Rule
	matched := matchRules(dom, req, buf[:len(req.Descriptors)])
	// (replaced rules too: a value its own rule hashes never leaves raw)
	return c.applyHashing(req, matched)
}

// matchRules fills matched with each descriptor's rule: its own (an
// override, a release naming it), else the one its entries match.
func matchRules(dom config.Domain, req *ratelimit.Request, matched []*config.Rule) []*config.Rule {
	for i := range req.Descriptors {
		if matched[i] = req.Descriptors[i].Rule; matched[i] == nil {
			matched[i] = dom.Match(req.Descriptors[i].Entries)
		}
	}
	return matched
}

// apply returns req with the values of hashed entries replaced, as a copy
// (the caller's request is not modified), or req itself when no matched
// rule hashes.
func (c *Checker) applyHashing(req *ratelimit.Request, matched []*config.Rule) *ratelimit.Request {
	need := false
	for _, r := range matched {
		if r != nil && r.Hashed != nil {
			need = true
			break
		}
	}
	if !need {
		return req
	}
	if c.hash.random {
		c.hash.onceLog.Do(func() {
			c.cfg.Logger.Warn("hash_values rules are hashed with a random per-process key: set checker.hash_key " +
				"(VELVETROPE_HASH_KEY) to the same secret on every checker, or their counters are not shared")
		})
	}
	cp := *req
	cp.Descriptors = make([]ratelimit.Descriptor, len(req.Descriptors))
	copy(cp.Descriptors, req.Descriptors)
	for i, r := range matched {
		if r == nil || r.Hashed == nil {
			continue
		}
		es := make([]config.Entry, len(cp.Descriptors[i].Entries))
		copy(es, cp.Descriptors[i].Entries)
		for j := range es {
			if j < len(r.Hashed) && r.Hashed[j] {
				es[j].Value = c.hash.value(req.Domain, es[j].Key, es[j].Value)
			}
		}
		cp.Descriptors[i].Entries = es
	}
	return &cp
}
