package config

// Concurrency limits (docs/rules.md, "Concurrency limits"): `concurrency:
// {max_in_flight: N, lease_ttl: 30s}` in place of a rate_limit holds a
// descriptor to N requests in flight. Each admitted request holds a lease
// in the counter store until it is released or its TTL ends, so a client
// that dies holding leases leaks nothing beyond the TTL.

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// AlgConcurrency is the algorithm of a concurrency rule: leases counted
// in the store (mode sync). It is no `algorithm:` a rule file names: the
// concurrency block sets it.
const AlgConcurrency Algorithm = "concurrency"

// Concurrency bounds.
const (
	DefaultLeaseTTL = 30 * time.Second
	MinLeaseTTL     = time.Second
	MaxLeaseTTL     = 24 * time.Hour
	MaxInFlight     = 1 << 24
)

// ConcurrencySpec is a descriptor's concurrency block.
type ConcurrencySpec struct {
	MaxInFlight int64
	LeaseTTL    time.Duration
}

// concurrencySpec reads a descriptor's concurrency block.
func (p *parser) concurrencySpec(n *yaml.Node) *ConcurrencySpec {
	cs := &ConcurrencySpec{LeaseTTL: DefaultLeaseTTL}
	seen := false
	p.fields(n, "concurrency", []string{"max_in_flight", "lease_ttl"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "max_in_flight":
			seen = true
			if m, ok := p.integerOK(v, "concurrency.max_in_flight"); ok && (m < 1 || m > MaxInFlight) {
				p.errorf(v, "concurrency.max_in_flight: must be between 1 and %d, got %s", MaxInFlight, v.Value)
			} else if ok {
				cs.MaxInFlight = m
			}
		case "lease_ttl":
			d, err := time.ParseDuration(p.str(v, "concurrency.lease_ttl"))
			if err != nil || d < MinLeaseTTL || d > MaxLeaseTTL || d%time.Millisecond != 0 {
				p.errorf(v, "concurrency.lease_ttl: want a duration from %s to %s in whole milliseconds, got %q", MinLeaseTTL, MaxLeaseTTL, v.Value)
				return
			}
			cs.LeaseTTL = d
		}
	})
	if n.Kind == yaml.MappingNode && !seen {
		p.errorf(n, "concurrency: missing max_in_flight")
	}
	return cs
}

// checkConcurrency reports what a concurrency block does not combine
// with: it is the descriptor's limit (no rate_limit, no limits), decided
// in the store (no mode, near_limit, shards), never deferred nor lent to.
func (p *parser) checkConcurrency(n *yaml.Node, d *Descriptor) {
	var clash []string
	for _, c := range []struct {
		set  bool
		name string
	}{
		{d.RateLimit != nil && d.Limits == nil, "rate_limit"}, {d.Limits != nil, "limits"}, {d.Algorithm != "", "algorithm"},
		{d.Burst != 0, "burst"}, {d.Throttle.Type != "", "throttle"}, {d.OnExceed != "", "on_exceed"}, {d.Mode != "", "mode"},
		{d.NearLimit != "", "near_limit"}, {d.Shards != 0, "shards"}, {d.Defer != nil, "defer"}, {d.Plans != nil, "plans"},
	} {
		if c.set {
			clash = append(clash, c.name)
		}
	}
	if len(clash) > 0 {
		p.errorf(n, "descriptor %q: concurrency is the descriptor's limit, counted by leases in the store: it takes no %s", d.Key, strings.Join(clash, ", "))
	}
	if d.Failure == FailLocalBudget {
		p.errorf(n, "descriptor %q: concurrency takes failure open or closed (a lease is the store's: no local budget counts it)", d.Key)
	}
}

// concurrencyRateLimit is the rate limit a concurrency rule compiles from:
// its limit is max_in_flight (the rule's window is the lease TTL).
func concurrencyRateLimit(cs *ConcurrencySpec) *RateLimit {
	return &RateLimit{RequestsPerUnit: cs.MaxInFlight}
}

// String describes the block as a rule listing shows it.
func (cs *ConcurrencySpec) String() string {
	return fmt.Sprintf("%d in flight, leases of %s", cs.MaxInFlight, cs.LeaseTTL)
}
