// Package controlset compiles the operator controls in force against a
// rule set into what a checker's request path applies: for each domain,
// the controlled descriptors by a hash of their entries, each with the
// rule that replaces its match (an exempt rule for allow, a blocked one
// for deny, the rule at a new limit), and the pools at an operator's
// capacity. A Set is immutable once built; the checker swaps in a new one
// when the controls or the rules change.
package controlset

import (
	"hash/maphash"
	"slices"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Set is the controls of one rule set, compiled.
type Set struct {
	rules   *config.RuleSet         // the rule set the overrides were built against
	pools   map[string]*config.Rule // pool rule id → the pool at an operator's capacity
	list    []counters.Control
	domains map[string]Domain
	seed    maphash.Seed
	n       int
	expires int64 // the earliest expiry (0: none)
}

// Domain is one domain's controlled descriptors, by entries hash.
type Domain map[uint64]*control

// control is one control compiled against the rule set.
type control struct {
	entries []config.Entry
	expires int64
	// rule replaces the matched rule; nil leaves the descriptor unmatched
	// (an allow on a descriptor no rule limits).
	rule *config.Rule
	next *control // same hash
}

// Compile builds the Set of the controls of list live at now under rs
// (seed keys the entries hash). Controls whose rule is gone or whose
// limit no longer fits it are kept in the list but apply to nothing: a
// reload may bring their rule back.
func Compile(rs *config.RuleSet, list []counters.Control, now int64, seed maphash.Seed) *Set {
	s := &Set{rules: rs, domains: map[string]Domain{}, seed: seed}
	for i := range list {
		if list[i].Live(now) {
			s.list = append(s.list, list[i])
		}
	}
	for i := range s.list {
		ct := &s.list[i]
		if ct.Action == counters.ActionPool { // a pool's capacity, not a descriptor's control
			s.addPool(rs, ct)
			continue
		}
		r, ok := ruleOf(rs, ct)
		if !ok {
			continue
		}
		if ct.ExpiresAt != 0 && (s.expires == 0 || ct.ExpiresAt < s.expires) {
			s.expires = ct.ExpiresAt
		}
		m := s.domains[ct.Domain]
		if m == nil {
			m = Domain{}
			s.domains[ct.Domain] = m
		}
		h := s.hash(ct.Entries)
		m[h] = &control{entries: ct.Entries, expires: ct.ExpiresAt, rule: r, next: m[h]}
		s.n++
	}
	return s
}

// ruleOf is the rule a control puts in place of its descriptor's match;
// false when it applies to nothing under rs.
func ruleOf(rs *config.RuleSet, ct *counters.Control) (*config.Rule, bool) {
	base := rs.RuleByID(ct.Rule)
	switch ct.Action {
	case counters.ActionAllow:
		if base == nil {
			return nil, true // a descriptor no rule limits: left unmatched
		}
		return base.Exempt(), true
	case counters.ActionDeny:
		if base == nil {
			base, _ = config.OverrideRule(ct.Domain, ct.Entries, 0, config.Second, 1, nil)
			base.ID = config.InternalRuleID(ct.Domain, "control", "deny")
		}
		return base.Blocked(), true
	case counters.ActionLimit:
		if base == nil || base.CheckLimit(ct.Limit) != nil {
			return nil, false // the rule is gone, or the limit does not fit it (a reload changed its throttle)
		}
		r, err := base.WithLimit(ct.Limit)
		return r, err == nil
	}
	return nil, false
}

// addPool records a pool's capacity; a stored capacity is input too
// (another version, a hand edit) and is checked as a rule file's.
func (s *Set) addPool(rs *config.RuleSet, ct *counters.Control) {
	if len(ct.Entries) != 1 || config.CheckPoolCapacity(ct.Limit) != nil {
		return
	}
	if pr := rs.Pool(ct.Domain, ct.Entries[0].Value); pr != nil {
		if r, err := pr.WithLimit(ct.Limit); err == nil {
			if s.pools == nil {
				s.pools = map[string]*config.Rule{}
			}
			s.pools[pr.ID] = r
		}
	}
}

// hash hashes a descriptor's keys and values (controls match the exact
// entries, whatever rule they match).
func (s *Set) hash(es []config.Entry) uint64 {
	var h uint64 = 0x5bd1e995
	for i := range es {
		h = (h^maphash.String(s.seed, es[i].Key))*0x9e3779b97f4a7c15 + 1
		h = (h^maphash.String(s.seed, es[i].Value))*0x9e3779b97f4a7c15 + uint64(i)
	}
	return h
}

// Rules is the rule set s was compiled against.
func (s *Set) Rules() *config.RuleSet { return s.rules }

// List is the controls live when s was compiled, as stored (nil Set:
// none).
func (s *Set) List() []counters.Control {
	if s == nil {
		return nil
	}
	return s.list
}

// Applied is how many of them apply to descriptors under s's rules.
func (s *Set) Applied() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Expired says a control of s has expired by now: s needs compiling again.
func (s *Set) Expired(now int64) bool { return s.expires != 0 && now >= s.expires }

// Listed counts the controls in force at now as an operator lists them
// (operate's Controls, which a test holds equal): live, pool capacities
// apart. A nil Set lists none.
func (s *Set) Listed(now int64) int {
	n := 0
	for i := 0; s != nil && i < len(s.list); i++ {
		if s.list[i].Live(now) && s.list[i].Action != counters.ActionPool {
			n++
		}
	}
	return n
}

// PoolRule is the rule pool decides with: at an operator's capacity, else
// pool itself (a nil Set: pool).
func (s *Set) PoolRule(pool *config.Rule) *config.Rule {
	if s != nil {
		if r := s.pools[pool.ID]; r != nil {
			return r
		}
	}
	return pool
}

// Apply replaces the matched rule of every descriptor of req that has a
// control in force at now, and returns how many it replaced (a nil Set:
// none). It runs after hashing, and allocates nothing.
func (s *Set) Apply(req *ratelimit.Request, matched []*config.Rule, now int64) int {
	if s == nil { // the request path's usual case: no control in force
		return 0
	}
	return s.apply(req, matched, now)
}

func (s *Set) apply(req *ratelimit.Request, matched []*config.Rule, now int64) int {
	d := s.domains[req.Domain]
	if d == nil {
		return 0
	}
	n := 0
	for i := range req.Descriptors {
		es := req.Descriptors[i].Entries
		for lc := d[s.hash(es)]; lc != nil; lc = lc.next {
			if (lc.expires == 0 || now < lc.expires) && slices.Equal(lc.entries, es) {
				matched[i] = lc.rule
				n++
				break
			}
		}
	}
	return n
}
