// Package operate holds an operator's actions on a running checker:
// controls (allow, deny or a limit for one descriptor), pool capacities,
// and inspecting and resetting a counter. They are what the admin
// endpoints call; none of them is on the decision path, which is package
// checker's alone: it applies what is stored here at its next read of
// the control store, and every checker sharing the store does too.
package operate

import (
	"fmt"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Operator acts on one checker and its counter store. Safe for
// concurrent use.
type Operator struct {
	c     *checker.Checker
	store counters.Store
	ctl   counters.ControlStore // nil when the store keeps no controls
}

// New returns the operator of c, whose counter store is store (the one
// c was built with: what is stored here is what c reads back).
func New(c *checker.Checker, store counters.Store) *Operator {
	ctl, _ := store.(counters.ControlStore)
	return &Operator{c: c, store: store, ctl: ctl}
}

// hashed is entries as the checker counts them under rule r (nil: none
// matches): values of hash_values entries replaced by their keyed hashes.
func (o *Operator) hashed(domain string, r *config.Rule, entries []config.Entry) []config.Entry {
	req := &ratelimit.Request{Domain: domain, Descriptors: []ratelimit.Descriptor{{Entries: entries, Rule: r}}}
	return o.c.Hashed(req).Descriptors[0].Entries
}

// counterOf finds the rule entries match in domain and the counter key
// (values hashed where the rule says so).
func (o *Operator) counterOf(domain string, entries []config.Entry) (*config.Rule, []config.Entry, string, error) {
	dom, ok := o.c.Rules().Lookup(domain)
	if !ok {
		return nil, nil, "", &ratelimit.FieldError{Field: "domain", Err: fmt.Errorf("%w %q", ratelimit.ErrUnknownDomain, domain)}
	}
	r := dom.Match(entries)
	if r == nil {
		return nil, nil, "", &ratelimit.FieldError{Field: "descriptor", Err: ErrNoRule}
	}
	es := o.hashed(domain, r, entries)
	return r, es, string(config.AppendCounterKey(nil, r, es)), nil
}
