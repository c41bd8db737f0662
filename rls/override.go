package rls

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/velvetrope/velvetrope/config"
)

// overrides caches the rules of per-descriptor limit overrides, so a
// proxy that sends the same override on every call builds its rule once.
// The cache is bounded: past maxOverrides distinct overrides a rule is
// built per call, which costs allocations but never correctness, since
// counters are keyed by the rule's ID, not by the cached pointer.
type overrides struct {
	seed   maphash.Seed
	shards [16]struct {
		mu    sync.RWMutex
		rules map[uint64]*config.Rule
	}
}

const maxOverrides = 1 << 14

func newOverrides() *overrides {
	o := &overrides{seed: maphash.MakeSeed()}
	for i := range o.shards {
		o.shards[i].rules = make(map[uint64]*config.Rule)
	}
	return o
}

// rule returns the override rule for d's keys and limit in domain; base is
// the rule the entries match in the live rule set (nil: none).
//
// hashed says which values to hash when base has no hash_values of its own
// ([config.RuleSet.HashedKeys]); it depends on the domain and keys only,
// as the cache does.
func (o *overrides) rule(domain string, es []config.Entry, lim *ratelimitv3.RateLimitDescriptor_RateLimitOverride, base *config.Rule, hashed []bool) (*config.Rule, error) {
	unit, err := unitFrom(lim.Unit)
	if err != nil {
		return nil, err
	}
	mult := uint32(1)
	if m := lim.UnitMultiplier; m != nil && m.Value > 1 {
		mult = m.Value
	}
	h := maphash.String(o.seed, domain)
	for _, e := range es {
		h = (h ^ maphash.String(o.seed, e.Key)) * 0x9e3779b97f4a7c15
	}
	h ^= uint64(lim.RequestsPerUnit)<<8 | uint64(unit)
	h = (h ^ uint64(mult)) * 0x9e3779b97f4a7c15
	if base != nil {
		h = (h ^ maphash.String(o.seed, base.ID)) * 0x9e3779b97f4a7c15
	}
	sh := &o.shards[h%uint64(len(o.shards))]
	sh.mu.RLock()
	r := sh.rules[h]
	sh.mu.RUnlock()
	if r != nil && r.Base == base && same(r, domain, es, int64(lim.RequestsPerUnit), unit, mult) && (base != nil || slices.Equal(r.Hashed, hashed)) {
		return r, nil
	}
	// copies: the request's strings may alias a buffer the gRPC path reuses
	kept := make([]config.Entry, len(es))
	for i, e := range es {
		kept[i] = config.Entry{Key: strings.Clone(e.Key), Value: strings.Clone(e.Value)}
	}
	r, err = config.OverrideRule(strings.Clone(domain), kept, int64(lim.RequestsPerUnit), unit, mult, base)
	if err != nil {
		return nil, err
	}
	if r.Hashed == nil && len(hashed) == len(kept) {
		r.Hashed = hashed
	}
	sh.mu.Lock()
	if len(sh.rules) < maxOverrides/len(o.shards) {
		sh.rules[h] = r
	}
	sh.mu.Unlock()
	return r, nil
}

// same guards against a hash collision between two overrides.
func same(r *config.Rule, domain string, es []config.Entry, limit int64, unit config.Unit, mult uint32) bool {
	if r.Domain != domain || r.Limit != limit || r.Unit != unit || r.Window != unit.Duration()*time.Duration(mult) || len(r.Path) != len(es) {
		return false
	}
	for i := range es {
		if r.Path[i].Key != es[i].Key {
			return false
		}
	}
	return true
}

func unitFrom(u typev3.RateLimitUnit) (config.Unit, error) {
	switch u {
	case typev3.RateLimitUnit_SECOND:
		return config.Second, nil
	case typev3.RateLimitUnit_MINUTE:
		return config.Minute, nil
	case typev3.RateLimitUnit_HOUR:
		return config.Hour, nil
	case typev3.RateLimitUnit_DAY:
		return config.Day, nil
	case typev3.RateLimitUnit_MONTH:
		return config.Month, nil
	case typev3.RateLimitUnit_YEAR:
		return config.Year, nil
	}
	return 0, errUnit
}
