package ratelimit_test

import (
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestMatch: a descriptor's own rule (an override) wins over the one its
// entries match; entries that match nothing get nil.
func TestMatch(t *testing.T) {
	rs := testrules.Store(t, `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`).Load()
	dom, _ := rs.Lookup("api")
	user := []config.Entry{{Key: "user", Value: "a"}}
	own := &config.Rule{ID: "override"}
	req := &ratelimit.Request{Domain: "api", Descriptors: []ratelimit.Descriptor{
		{Entries: user}, {Entries: user, Rule: own}, {Entries: []config.Entry{{Key: "nobody", Value: "x"}}},
	}}
	got := req.Match(dom, make([]*config.Rule, 3))
	want := []*config.Rule{dom.Match(user), own, nil}
	if want[0] == nil {
		t.Fatal("the rule set has no rule for user")
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("descriptor %d: rule %v, want %v", i, got[i], want[i])
		}
	}
}
