package decisions

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/local"
	"github.com/velvetrope/velvetrope/ratelimit"
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
	n := New(store.Load)
	c := observed{l, n}
	one := func(kv ...string) *ratelimit.Request {
		r := &ratelimit.Request{Domain: "api", Hits: 1}
		for i := 0; i+1 < len(kv); i += 2 {
			r.Descriptors = append(r.Descriptors, ratelimit.Descriptor{Entries: []config.Entry{{Key: kv[i], Value: kv[i+1]}}})
		}
		return r
	}
	var d ratelimit.Decision
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
	if err := c.Check(context.Background(), &ratelimit.Request{Domain: "nope", Hits: 1, Descriptors: one("ip", "1").Descriptors}, &d); err == nil {
		t.Fatal("unknown domain accepted")
	}
	reg := metrics.New()
	n.Register(reg)
	rec := httptest.NewRecorder()
	reg.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`velvetrope_decisions_total{decision="allow",domain="api",mode="async",override="false",rule="api:ip"} 2`,
		`velvetrope_decisions_total{decision="deny",domain="api",mode="async",override="false",rule="api:ip"} 2`,
		`velvetrope_decisions_total{decision="allow",domain="api",mode="async",override="false",rule="api:shadow"} 1`,
		`velvetrope_decisions_total{decision="shadow_deny",domain="api",mode="async",override="false",rule="api:shadow"} 2`,
		`velvetrope_decisions_total{decision="degraded",domain="api",mode="async",override="false",rule="api:ip"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %s in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "api:free") || strings.Contains(out, `value="`) {
		t.Fatalf("unlimited rules or values in the labels:\n%s", out)
	}
}

// TestSeriesBoundedWhateverTheInput: 3,000 distinct limit overrides and
// 50 reloads leave one series per rule and outcome (issue 10, item 3:
// before, every override limit was a series and a retained rule).
func TestSeriesBoundedWhateverTheInput(t *testing.T) {
	store := testrules.Store(t, rules)
	l := testrules.Local(t, store, testrules.NewClock(), 0)
	n := New(store.Load)
	c := observed{l, n}
	var d ratelimit.Decision
	for i := range 3000 {
		es := []config.Entry{{Key: "ip", Value: "1.2.3.4"}}
		base := store.Load().Match("api", es)
		r, err := config.OverrideRule("api", es, int64(i+1), config.Minute, 1, base)
		if err != nil {
			t.Fatal(err)
		}
		noBase, _ := config.OverrideRule("api", []config.Entry{{Key: "other", Value: "v"}}, int64(i+1), config.Minute, 1, nil)
		req := &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{
			{Entries: es, Rule: r}, {Entries: []config.Entry{{Key: "other", Value: "v"}}, Rule: noBase}}}
		if err := c.Check(context.Background(), req, &d); err != nil {
			t.Fatal(err)
		}
		if i%60 == 0 { // a reload: new pointers for every rule
			store.Swap(testrules.Store(t, rules).Load())
			one := &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: es}}}
			if err := c.Check(context.Background(), one, &d); err != nil {
				t.Fatal(err)
			}
			n.Samples()
		}
	}
	samples := n.Samples()
	series := map[string]float64{}
	for _, s := range samples {
		series[strings.Join(s.Labels, "|")] += s.Value
	}
	// api:ip plain, api:ip override, api:override (no base): 3 × 7 outcomes
	if len(samples) != 3*len(outcomes) {
		t.Fatalf("got %d samples, want %d: %v", len(samples), 3*len(outcomes), series)
	}
	want := map[string]float64{
		"api|api:ip|async|true|allow":        3000, // each override limit is its own counter: all admitted
		"api|api:override|async|true|allow":  3000,
		"api|api:ip|async|false|allow":       1, // the rule itself: 1 per minute
		"api|api:ip|async|false|deny":        49,
		"api|api:override|async|true|deny":   0,
		"api|api:ip|async|false|shadow_deny": 0,
	}
	for k, v := range want {
		if series[k] != v {
			t.Fatalf("%s = %v, want %v (all: %v)", k, series[k], v, series)
		}
	}
	held := 0
	n.rules.Range(func(any, any) bool { held++; return true })
	if held > 3 {
		t.Fatalf("%d rule pointers held after 50 reloads, want at most the live rules", held)
	}
}

// observed decides with a checker and counts every answered decision, as
// the API layers do.
type observed struct {
	l *local.Engine
	n *Counter
}

func (o observed) Check(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision) error {
	err := o.l.Check(ctx, req, d)
	if err == nil {
		o.n.Observe(d)
	}
	return err
}

// TestDeferElasticAndSoftCounted: a deferred request counts as defer,
// an elastic admission over the limit as allow and elastic, a soft one
// over the base limit as allow and over_soft.
func TestDeferElasticAndSoftCounted(t *testing.T) {
	store := testrules.Store(t, `domain: shop
pools:
  - name: p
    rate_limit: {unit: minute, requests_per_unit: 10}
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://t.test"}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1}
    algorithm: fixed_window
    throttle: {type: elastic, pool: p, max_multiplier: 2}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 2}
    algorithm: fixed_window
    throttle: {type: soft, overage_percent: 50}
`)
	l := testrules.Local(t, store, testrules.NewClock(), 0)
	n := New(store.Load)
	c := observed{l, n}
	for _, key := range []string{"user", "tenant", "plan"} {
		for range 3 {
			var d ratelimit.Decision
			req := &ratelimit.Request{Domain: "shop", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: key, Value: "a"}}}}}
			if err := c.Check(context.Background(), req, &d); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string]float64{}
	for _, s := range n.Samples() {
		got[s.Labels[1]+"|"+s.Labels[4]] = s.Value
	}
	for k, v := range map[string]float64{"shop:user|allow": 1, "shop:user|defer": 2, "shop:user|deny": 0,
		"shop:tenant|allow": 2, "shop:tenant|elastic": 1, "shop:tenant|deny": 1,
		"shop:plan|allow": 3, "shop:plan|over_soft": 1, "shop:plan|deny": 0} {
		if got[k] != v {
			t.Fatalf("%s = %v, want %v (all %v)", k, got[k], v, got)
		}
	}
}
