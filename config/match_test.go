package config

import "testing"

// precedenceRules lists, for one key, wildcards before the exact value
// and around the key-only default, so that only the precedence (not the
// file order) can make the exact value win.
const precedenceRules = `domain: d
descriptors:
  - key: k
    value: "ex*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: k
    value: "e*"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: n
    value: "v*"
    descriptors:
      - key: m
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: n
    descriptors:
      - key: m
        value: x
        rate_limit: {unit: second, requests_per_unit: 6}
`

// TestMatchPrecedence: as in Envoy's ratelimit service, each entry takes
// the exact value, else the first wildcard in file order that matches,
// else the key-only default, and only that one branch is descended (a
// deeper rule under another branch is not found).
func TestMatchPrecedence(t *testing.T) {
	f, err := ParseRules("precedence.yaml", []byte(precedenceRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compile([]*File{f})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		entries []Entry
		limit   int64 // -1: no rule
	}{
		{entries("k", "exact"), 1},        // exact beats every wildcard and the default
		{entries("k", "extra"), 2},        // both wildcards match: the first in the file
		{entries("k", "eel"), 3},          // only the second wildcard
		{entries("k", "zzz"), 4},          // the default
		{entries("k", "ex"), 2},           // a star matches the empty run
		{entries("n", "vx", "m", "x"), 5}, // the wildcard branch, whose m has no value x: its default
		{entries("n", "w", "m", "x"), 6},  // the default branch
		{entries("n", "w", "m", "y"), -1}, // the default branch has no default for m
		{entries("n", "vx"), -1},          // a level without rate_limit
	}
	for i, c := range cases {
		r := rs.Match("d", c.entries)
		switch {
		case c.limit < 0 && r != nil:
			t.Fatalf("case %d %v: got rule %s, want none", i, c.entries, r.ID)
		case c.limit >= 0 && (r == nil || r.Limit != c.limit):
			t.Fatalf("case %d %v: got %+v, want the rule of limit %d", i, c.entries, r, c.limit)
		}
	}
}
