package controlset

import (
	"hash/maphash"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const rulesYAML = `domain: shop
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 10000}
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 500}
    algorithm: fixed_window
    throttle: {type: elastic, pool: shared, max_multiplier: 3}
`

// TestCompileAndApply: each action puts its rule in place of the
// descriptor's match, only for the exact entries and while live; a control
// that cannot apply (its rule gone, its limit not fitting, an unknown
// action) applies to nothing; a pool's capacity is a pool rule, not a
// descriptor's control.
func TestCompileAndApply(t *testing.T) {
	rs := testrules.Store(t, rulesYAML).Load()
	dom, _ := rs.Lookup("shop")
	es := func(v string) []config.Entry { return []config.Entry{{Key: "tenant", Value: v}} }
	rule := dom.Match(es("a"))
	const now = int64(1_000)
	ctl := func(v, action, ruleID string, limit, expires int64) counters.Control {
		return counters.Control{ID: counters.ControlID("shop", es(v)), Domain: "shop", Entries: es(v), Action: action,
			Rule: ruleID, Limit: limit, ExpiresAt: expires}
	}
	list := []counters.Control{
		ctl("allowed", counters.ActionAllow, rule.ID, 0, 0),
		ctl("denied", counters.ActionDeny, rule.ID, 0, 0),
		ctl("limited", counters.ActionLimit, rule.ID, 7, 0),
		ctl("expiring", counters.ActionDeny, rule.ID, 0, now+10),
		ctl("expired", counters.ActionDeny, rule.ID, 0, now-1),
		ctl("gone", counters.ActionLimit, "shop:no-such-rule", 7, 0),
		ctl("bogus", "bogus", rule.ID, 0, 0),
		{ID: "pool", Domain: "shop", Entries: []config.Entry{{Key: "pool", Value: "shared"}}, Action: counters.ActionPool, Limit: 42},
	}
	s := Compile(rs, list, now, maphash.MakeSeed())
	if got := len(s.List()); got != 7 { // every live one, the expired one dropped
		t.Fatalf("%d controls listed, want 7", got)
	}
	if s.Applied() != 4 || s.Listed(now) != 6 || s.Expired(now) || !s.Expired(now+10) {
		t.Fatalf("applied %d listed %d expired %v/%v", s.Applied(), s.Listed(now), s.Expired(now), s.Expired(now+10))
	}
	if p := s.PoolRule(rs.Pool("shop", "shared")); p == nil || p.Limit != 42 {
		t.Fatalf("pool capacity: %+v", p)
	}
	for _, c := range []struct {
		value string
		at    int64
		check func(r *config.Rule) bool
	}{
		{"allowed", now, func(r *config.Rule) bool { return r != nil && r.Unlimited }},
		{"denied", now, func(r *config.Rule) bool { return r != nil && r.Limit == 0 }},
		{"limited", now, func(r *config.Rule) bool { return r != nil && r.Limit == 7 }},
		{"expiring", now, func(r *config.Rule) bool { return r != nil && r.Limit == 0 }},
		{"expiring", now + 10, func(r *config.Rule) bool { return r == rule }},
		{"expired", now, func(r *config.Rule) bool { return r == rule }},
		{"gone", now, func(r *config.Rule) bool { return r == rule }},
		{"bogus", now, func(r *config.Rule) bool { return r == rule }},
		{"other", now, func(r *config.Rule) bool { return r == rule }},
	} {
		req := &ratelimit.Request{Domain: "shop", Descriptors: []ratelimit.Descriptor{{Entries: es(c.value)}}}
		matched := []*config.Rule{rule}
		s.Apply(req, matched, c.at)
		if !c.check(matched[0]) {
			t.Errorf("%s at %d: matched %+v", c.value, c.at, matched[0])
		}
	}
}
