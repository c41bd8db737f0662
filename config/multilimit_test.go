package config

import (
	"strings"
	"testing"
)

// TestSeveralLimitsCompile: limits give the first limit the id a single
// rate_limit has (adding a limit keeps the counters) and each further one
// an id of its own that no path can spell.
func TestSeveralLimitsCompile(t *testing.T) {
	rs, err := compileSrc(t, `domain: api
descriptors:
  - key: api_key
    algorithm: token_bucket
    burst: 20
    limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: day, requests_per_unit: 10000}
  - key: api_key
    value: "#limit"
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	if err != nil {
		t.Fatal(err)
	}
	r := rs.Match("api", []Entry{{"api_key", "k"}})
	if r.ID != "api:api_key" || r.Limit != 10 || r.Unit != Second || len(r.Extra) != 1 {
		t.Fatalf("first limit %+v", r)
	}
	x := r.Extra[0]
	switch {
	case x.ID != "api:api_key:#limit:day" || x.Limit != 10000 || x.Unit != Day || x.Burst != 20000 || x.Limiter == nil:
		t.Fatalf("day limit: id %q limit %d unit %s burst %d", x.ID, x.Limit, x.Unit, x.Burst)
	case rs.RuleByID(x.ID) != x:
		t.Fatal("the day limit is not a rule of the set")
	case r.Exempt().Extra != nil || r.Blocked().Extra != nil:
		t.Fatal("an operator's allow or deny keeps the further limits")
	}
	if other := rs.Match("api", []Entry{{"api_key", "#limit"}}); other.ID != `api:api_key=#limit` {
		t.Fatalf("a value spelling the kind: %q", other.ID)
	}
}

func TestSeveralLimitsErrors(t *testing.T) {
	const head = "domain: a\ndescriptors:\n  - key: k\n"
	two := "    limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: day, requests_per_unit: 9}\n"
	cases := []struct{ name, src, want string }{
		{"one limit", head + "    limits:\n      - {unit: second, requests_per_unit: 1}\n", "plans.yaml:5:7: limits: want at least 2 limits"},
		{"five limits", head + "    limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: minute, requests_per_unit: 2}\n      - {unit: hour, requests_per_unit: 3}\n      - {unit: day, requests_per_unit: 4}\n      - {unit: week, requests_per_unit: 5}\n",
			"plans.yaml:5:7: limits: 5 limits, at most 4"},
		{"same unit twice", head + "    limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 2}\n",
			"plans.yaml:6:16: limits: a second limit per second (the first at line 5)"},
		{"zero", head + "    limits:\n      - {unit: second, requests_per_unit: 0}\n      - {unit: day, requests_per_unit: 2}\n",
			"plans.yaml:5:43: limits.requests_per_unit: must be at least 1"},
		{"with rate_limit", head + "    rate_limit: {unit: second, requests_per_unit: 1}\n" + two, `plans.yaml:3:5: descriptor "k": rate_limit and limits: give one`},
		{"with defer", head + "    algorithm: fixed_window\n    on_exceed: defer\n    defer: {target: \"http://t\"}\n" + two, `descriptor "k": limits and on_exceed defer do not combine`},
		{"with local", head + "    mode: local\n" + two, `descriptor "k": limits need mode async or sync`},
		{"with plans", head + "    plans: {table: t, limits: {pro: 2}}\n" + two, `descriptor "k": limits and plans do not combine`},
		{"unknown field", head + "    limits:\n      - {unit: second, requests_per_unit: 1, name: x}\n      - {unit: day, requests_per_unit: 2}\n",
			`limits: unknown field "name"`},
		{"not a list", head + "    limits: {unit: second}\n", "limits: want a list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := compileSrc(t, c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant %s", err, c.want)
			}
		})
	}
}

// TestStagedDomains: only a staged version's rules (rulesync marks them)
// may live under a domain ending in StagedSuffix; a domain staged before
// it has live rules is known, and limits nothing.
func TestStagedDomains(t *testing.T) {
	f, err := ParseRules("q.yaml", []byte("domain: \"q#staged\"\ndescriptors: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile([]*File{f}); err == nil || !strings.Contains(err.Error(), `q.yaml:1:1: domain "q#staged" ends with "#staged"`) {
		t.Fatalf("a rule file's staged domain: %v", err)
	}
	f.Staged = true
	rs, err := Compile([]*File{f})
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := rs.Staged("q"); !ok || name != "q#staged" || !rs.IsStaged("q#staged") || rs.IsStaged("q") {
		t.Fatalf("staged %q %v", name, ok)
	}
	if _, known := rs.Lookup("q"); !known {
		t.Fatal("a domain staged before any live rules is unknown: its requests would be refused")
	}
	if BaseDomain("q#staged") != "q" || BaseDomain("q") != "q" || BaseDomain("#staged") != "#staged" {
		t.Fatal("BaseDomain")
	}
}
