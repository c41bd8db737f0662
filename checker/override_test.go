package checker

import (
	"context"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestOverridesHashLikeTheirRule: issue 10, item 3. A per-request limit
// override of a descriptor whose rule says hash_values must not carry the
// raw value to the store, the deltas or the analytics (before, it did).
func TestOverridesHashLikeTheirRule(t *testing.T) {
	rules := ruleStore(t, "domain: api\ndescriptors:\n  - key: user_id\n    hash_values: true\n    algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	c, err := New(Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}}, rules, ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	es := []config.Entry{{Key: "user_id", Value: "priya@example.com"}}
	base := rules.Load().Match("api", es)
	r, err := config.OverrideRule("api", es, 3, config.Minute, 1, base)
	if err != nil {
		t.Fatal(err)
	}
	if r.MetricID() != "api:user_id" || !r.Override {
		t.Fatalf("override label %q, want the base rule's", r.MetricID())
	}
	for i := range 4 {
		var d ratelimit.Decision
		if err := c.Check(context.Background(), &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: es, Rule: r}}}, &d); err != nil {
			t.Fatal(err)
		}
		if want := i < 3; d.Allowed() != want {
			t.Fatalf("call %d: allowed %v, want %v (override limit 3)", i, d.Allowed(), want)
		}
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(prod.all) == 0 {
		t.Fatal("no deltas")
	}
	for _, d := range prod.all {
		if strings.Contains(d.CounterKey+d.DescriptorText, "priya") {
			t.Fatalf("raw value left the checker: %q / %q", d.CounterKey, d.DescriptorText)
		}
	}
}
