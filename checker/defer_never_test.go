package checker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestNeverFittingRequestIsNotDeferred: a request larger than a deferring
// rule can ever admit is refused, RetryNever, not deferred: a ticket for it
// would wait in the queue for a release that never comes. Every mode, a
// window and a bucket algorithm (and the sliding log where it runs).
func TestNeverFittingRequestIsNotDeferred(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: api\ndescriptors:\n")
	var keys []string
	for _, mode := range []string{"async", "sync", "local"} {
		for _, alg := range []string{"fixed_window", "token_bucket", "sliding_log"} {
			if alg == "sliding_log" && mode == "async" {
				continue // the format refuses it
			}
			key := mode + "_" + alg
			keys = append(keys, key)
			fmt.Fprintf(&b, "  - key: %s\n    algorithm: %s\n    mode: %s\n    on_exceed: defer\n    defer: {target: \"http://127.0.0.1:9\"}\n    rate_limit: {unit: minute, requests_per_unit: 3}\n", key, alg, mode)
		}
	}
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(Config{}, ruleStore(t, b.String()), ms, &applyProducer{store: ms}, clk)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		for _, hits := range []int64{4, 3} { // never fits; fits (then a refusal would defer)
			var d ratelimit.Decision
			if err := c.Check(context.Background(), req(hits, key, "x"), &d); err != nil {
				t.Fatal(err)
			}
			st := d.Statuses[0]
			switch {
			case hits > 3 && (d.Code != ratelimit.OverLimit || st.Code != ratelimit.OverLimit || !st.RetryNever):
				t.Fatalf("%s, %d hits (limit 3): decision %v, status %v, retry never %v; want OverLimit, never", key, hits, d.Code, st.Code, st.RetryNever)
			case hits <= 3 && !d.Allowed():
				t.Fatalf("%s, %d hits (limit 3): %v, want admitted", key, hits, d.Code)
			}
		}
		// now spent: a request that fits some day defers
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(1, key, "x"), &d); err != nil {
			t.Fatal(err)
		}
		if d.Code != ratelimit.Deferred {
			t.Fatalf("%s spent, 1 hit: %v, want Deferred", key, d.Code)
		}
	}
}
