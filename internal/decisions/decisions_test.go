package decisions

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/testrules"
)

const rules = `domain: api
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
`

func TestCountsPerRuleAndOutcome(t *testing.T) {
	store := testrules.Store(t, rules)
	l := testrules.Local(t, store, testrules.NewClock(), 0)
	n := new(Counter)
	c := Wrap(l, n)
	one := func(kv ...string) *checker.Request {
		r := &checker.Request{Domain: "api", Hits: 1}
		for i := 0; i+1 < len(kv); i += 2 {
			r.Descriptors = append(r.Descriptors, checker.Descriptor{Entries: []config.Entry{{Key: kv[i], Value: kv[i+1]}}})
		}
		return r
	}
	var d checker.Decision
	for range 3 { // ip: allow, deny, deny; shadow: allow, shadow_deny, shadow_deny
		if err := c.Check(context.Background(), one("ip", "1", "shadow", "x", "free", "y", "none", "z"), &d); err != nil {
			t.Fatal(err)
		}
	}
	// a reload: new rule pointers, same ids, the counts continue
	store.Swap(testrules.Store(t, rules).Load())
	if err := c.Check(context.Background(), one("ip", "2"), &d); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(context.Background(), &checker.Request{Domain: "nope", Hits: 1, Descriptors: one("ip", "1").Descriptors}, &d); err == nil {
		t.Fatal("unknown domain accepted")
	}
	reg := metrics.New()
	n.Register(reg)
	rec := httptest.NewRecorder()
	reg.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`velvetrope_decisions_total{decision="allow",domain="api",mode="async",rule="api:ip"} 2`,
		`velvetrope_decisions_total{decision="deny",domain="api",mode="async",rule="api:ip"} 2`,
		`velvetrope_decisions_total{decision="allow",domain="api",mode="async",rule="api:shadow"} 1`,
		`velvetrope_decisions_total{decision="shadow_deny",domain="api",mode="async",rule="api:shadow"} 2`,
		`velvetrope_decisions_total{decision="degraded",domain="api",mode="async",rule="api:ip"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %s in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "api:free") || strings.Contains(out, `value="`) {
		t.Fatalf("unlimited rules or values in the labels:\n%s", out)
	}
}
