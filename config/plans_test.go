package config

import (
	"strings"
	"testing"
)

func compileSrc(t *testing.T, src string) (*RuleSet, error) {
	t.Helper()
	f, err := ParseRules("plans.yaml", []byte(src))
	if err != nil {
		return nil, err
	}
	return Compile([]*File{f})
}

// TestPlansCompile: a plans block gives each plan a rule of its own limit
// that keeps the rule's id (its counters), and names the client by the
// path's entries without a fixed value.
func TestPlansCompile(t *testing.T) {
	rs, err := compileSrc(t, `domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: route
        value: /export
        descriptors:
          - key: user
            algorithm: token_bucket
            burst: 20
            rate_limit: {unit: second, requests_per_unit: 10}
            plans:
              table: customers
              limits: {pro: 100, blocked: 0}
`)
	if err != nil {
		t.Fatal(err)
	}
	r := rs.Rules()[0]
	if r.Plans == nil || r.Plans.Table != "customers" {
		t.Fatalf("plans %+v", r.Plans)
	}
	if got := r.Plans.Client; len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Fatalf("client entries %v, want [0 2] (tenant and user; route has a fixed value)", got)
	}
	pro := r.Plans.Rules["pro"]
	switch {
	case pro == nil:
		t.Fatal("no rule for plan pro")
	case pro.ID != r.ID || pro.Limit != 100 || pro.Burst != 200 || pro.Limiter == nil:
		t.Fatalf("pro: id %q limit %d burst %d limiter %v; want id %q, 100, 200 (burst scaled), a limiter", pro.ID, pro.Limit, pro.Burst, pro.Limiter, r.ID)
	case pro.Plans != nil:
		t.Fatal("a plan's rule carries the plans block: it would be looked up again")
	}
	if b := r.Plans.Rules["blocked"]; b == nil || b.Limit != 0 || b.Limiter != nil {
		t.Fatalf("blocked: %+v, want limit 0 without a limiter (refuses every request)", b)
	}
	if got := rs.PlanTables(); len(got) != 1 || got[0] != (PlanTable{"api", "customers"}) {
		t.Fatalf("tables %v", got)
	}
}

func TestPlansErrors(t *testing.T) {
	const head = "domain: a\ndescriptors:\n"
	cases := []struct{ name, src, want string }{
		{"no table", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {limits: {pro: 2}}\n",
			"plans.yaml:5:12: plans: missing table"},
		{"bad table name", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: Big/Name, limits: {pro: 2}}\n",
			`plans.yaml:5:20: plans.table: "Big/Name" holds 'B' at offset 0`},
		{"no limits", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t}\n",
			"plans.yaml:5:12: plans: missing limits"},
		{"limits a list", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: [1]}\n",
			"plans.yaml:5:31: plans.limits: want a mapping"},
		{"negative plan", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {pro: -3}}\n",
			"plans.yaml:5:37: plans.limits.pro: must not be negative"},
		{"plan not a number", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {pro: lots}}\n",
			`plans.yaml:5:37: plans.limits.pro: want an integer, got "lots"`},
		{"non-ASCII plan name", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {\"gö\": 3}}\n",
			"plans.limits: plan name \"gö\" holds 'ö' at offset 1"},
		{"nine client values", head + "  - key: a\n    descriptors:\n      - key: b\n        descriptors:\n          - key: c\n            descriptors:\n              - key: d\n                descriptors:\n                  - key: e\n                    descriptors:\n                      - key: f\n                        descriptors:\n                          - key: g\n                            descriptors:\n                              - key: h\n                                descriptors:\n                                  - key: i\n                                    rate_limit: {unit: second, requests_per_unit: 1}\n                                    plans: {table: t, limits: {pro: 2}}\n",
			"plans name a client by at most 8 values; this path has 9"},
		{"bad plan name", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {\"a:b\": 3}}\n",
			"plans.yaml:5:32: plans.limits: plan name \"a:b\" holds ':'"},
		{"duplicate plan", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans:\n      table: t\n      limits:\n        pro: 1\n        pro: 2\n",
			`plans.yaml:9:9: plans.limits: duplicate plan "pro" (first at line 8)`},
		{"no rate_limit", head + "  - key: k\n    plans: {table: t, limits: {pro: 2}}\n",
			`plans.yaml:3:5: descriptor "k": plans need a rate_limit`},
		{"unlimited", head + "  - key: k\n    rate_limit: {unlimited: true}\n    plans: {table: t, limits: {pro: 2}}\n",
			`plans.yaml:3:5: descriptor "k": an unlimited rate_limit takes no plans`},
		{"over a soft ceiling", head + "  - key: k\n    throttle: {type: soft, overage_percent: 50}\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {pro: 9223372036854775807}}\n",
			"plans.yaml:6:37: descriptor \"k\": plans.limits.pro: at most"},
		{"sliding log too long", head + "  - key: k\n    mode: sync\n    algorithm: sliding_log\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {pro: 2000000}}\n",
			"plans.yaml:7:37: descriptor \"k\": plans.limits.pro: sliding_log keeps one entry per request"},
		{"no client", head + "  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {pro: 2}}\n",
			`plans.yaml:6:12: descriptor "k": plans need a client`},
		{"hash_values", head + "  - key: k\n    hash_values: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {pro: 2}}\n",
			`plans.yaml:6:12: descriptor "k": plans and hash_values do not combine`},
		{"share_threshold", head + "  - key: k\n    value: \"a*\"\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {pro: 2}}\n",
			`plans.yaml:3:5: descriptor "k": plans and share_threshold do not combine`},
		{"shared parent", head + "  - key: g\n    value: \"a*\"\n    share_threshold: true\n    descriptors:\n      - key: k\n        rate_limit: {unit: second, requests_per_unit: 1}\n        plans: {table: t, limits: {pro: 2}}\n",
			`plans.yaml:9:16: descriptor "k": plans under a share_threshold entry do not combine`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := compileSrc(t, c.src)
			if err == nil {
				t.Fatalf("compiled, want error %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}
