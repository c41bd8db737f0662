package config

import (
	"strings"
)

// node is one level of a domain's descriptor tree. Children are found by
// key first (one string lookup), then by value within the key.
type node struct {
	keys map[string]*keyNode
	rule *Rule
}

// keyNode holds the children of one key: exact values, wildcard values
// (in file order) and the key-only default.
type keyNode struct {
	exact map[string]*node
	wild  []wildNode
	def   *node
}

type wildNode struct {
	pattern string
	next    *node
}

type domainNode struct {
	name string
	root *node
}

// Domain is one domain's compiled rules, looked up once per request.
type Domain struct{ root *node }

// Lookup returns the rules of domain, and whether there are any.
func (rs *RuleSet) Lookup(domain string) (Domain, bool) {
	if rs == nil {
		return Domain{}, false
	}
	if rs.few != nil || len(rs.domains) == 0 {
		for i := range rs.few {
			if rs.few[i].name == domain {
				return Domain{rs.few[i].root}, true
			}
		}
		return Domain{}, false
	}
	n, ok := rs.domains[domain]
	return Domain{n}, ok
}

// Match returns the rule for one request descriptor in domain, or nil when
// none applies. As in Envoy's ratelimit service, each entry descends one
// level, trying the exact value, then wildcard values (in file order), then
// the key-only default; a descriptor deeper than the tree, or one ending
// on a level without rate_limit, matches nothing. It does not allocate.
func (rs *RuleSet) Match(domain string, entries []Entry) *Rule {
	d, _ := rs.Lookup(domain)
	return d.Match(entries)
}

// Match returns the rule for one request descriptor in d (see
// [RuleSet.Match]).
func (d Domain) Match(entries []Entry) *Rule {
	n := d.root
	if n == nil || len(entries) == 0 {
		return nil
	}
	for _, e := range entries {
		kn := n.keys[e.Key]
		if kn == nil {
			return nil
		}
		var next *node
		if kn.exact != nil {
			next = kn.exact[e.Value]
		}
		if next == nil {
			for i := range kn.wild {
				if w := &kn.wild[i]; Glob(w.pattern, e.Value) {
					next = w.next
					break
				}
			}
		}
		if next == nil {
			next = kn.def
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n.rule
}

// HasDomain reports whether the set has rules for domain.
func (rs *RuleSet) HasDomain(domain string) bool {
	_, ok := rs.Lookup(domain)
	return ok
}

// Glob reports whether value matches pattern, where each "*" matches any
// run of characters (possibly empty). It does not allocate, and its cost
// is linear in the value whatever the pattern: a value an attacker sends
// is tried against every wildcard of a key.
func Glob(pattern, value string) bool {
	// The pattern is literal segments between stars: the first must start
	// the value and the last end it; each one between is taken at its
	// leftmost place after the previous. With '*' the only wildcard the
	// leftmost place is never worse than a later one, so nothing is ever
	// tried twice (the backtracking matcher this replaces was O(n·m): a
	// second per KiB against 3,000 "*aaa…b" patterns).
	i := strings.IndexByte(pattern, '*')
	if i < 0 {
		return pattern == value
	}
	if !strings.HasPrefix(value, pattern[:i]) {
		return false
	}
	value, pattern = value[i:], pattern[i+1:]
	for {
		j := strings.IndexByte(pattern, '*')
		if j < 0 {
			return strings.HasSuffix(value, pattern)
		}
		seg := pattern[:j]
		pattern = pattern[j+1:]
		k := strings.Index(value, seg)
		if k < 0 {
			return false
		}
		value = value[k+len(seg):]
	}
}

// HashedKeys returns, for entries of domain that match no rule, which
// values to hash: entry i where any descriptor of the domain with its key
// says hash_values (nil when none). It errs on the side of hashing: an
// Envoy limit override of entries that stop on a level without
// rate_limit has no rule to take hash_values from, and its value must not
// reach Kafka or ClickHouse raw because of that.
func (rs *RuleSet) HashedKeys(domain string, entries []Entry) []bool {
	keys := rs.hashedKeys[domain]
	if len(keys) == 0 {
		return nil
	}
	var out []bool
	for i, e := range entries {
		if keys[e.Key] {
			if out == nil {
				out = make([]bool, len(entries))
			}
			out[i] = true
		}
	}
	return out
}
