package checker

import (
	"context"
	"fmt"
	"github.com/velvetrope/velvetrope/config"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestProbeOfFreshKeyReportsReset: for every algorithm in every mode it
// runs in, a probe (hits 0) of a fresh key reports the reset the request
// of one hit after it reports, not 0; and a probe after that hit reports
// it too (the clock stands still). Checked at a window's start and inside
// it, and with a throttle that raises the ceiling.
func TestProbeOfFreshKeyReportsReset(t *testing.T) {
	algorithms := []string{"", "fixed_window", "sliding_window", "token_bucket", "leaky_bucket", "gcra", "sliding_log"}
	var b strings.Builder
	b.WriteString("domain: api\ndescriptors:\n")
	var keys []string
	for _, alg := range algorithms {
		for _, mode := range []string{"async", "sync", "local"} {
			if alg == "sliding_log" && mode == "async" {
				continue
			}
			key := fmt.Sprintf("%s_%s", or(alg, "envoy"), mode)
			keys = append(keys, key)
			fmt.Fprintf(&b, "  - key: %s\n    mode: %s\n    rate_limit: {unit: minute, requests_per_unit: 7}\n", key, mode)
			if alg != "" {
				fmt.Fprintf(&b, "    algorithm: %s\n", alg)
			}
			if mode == "async" && alg != "" {
				keys = append(keys, key+"_soft")
				fmt.Fprintf(&b, "  - key: %s_soft\n    mode: %s\n    algorithm: %s\n    throttle: {type: soft, overage_percent: 50}\n    rate_limit: {unit: minute, requests_per_unit: 7}\n", key, mode, alg)
			}
		}
	}
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}, InstanceName: "c"}, ruleStore(t, b.String()), ms, &applyProducer{store: ms}, clk)
	if err != nil {
		t.Fatal(err)
	}
	check := func(key, value string, hits int64) ratelimit.Status {
		t.Helper()
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(hits, key, value), &d); err != nil {
			t.Fatal(err)
		}
		if d.Code != ratelimit.OK {
			t.Fatalf("%s hits %d: %s", key, hits, codes(d))
		}
		return d.Statuses[0]
	}
	for _, offset := range []time.Duration{0, 17300 * time.Millisecond, time.Minute - time.Millisecond} {
		clk.ns.Store(t0 + int64(offset))
		for _, key := range keys {
			value := fmt.Sprintf("fresh-%v", offset)
			probe := check(key, value, 0)
			hit := check(key, value, 1)
			after := check(key, value, 0)
			if probe.ResetAfter <= 0 || probe.ResetAfter != hit.ResetAfter || after.ResetAfter != hit.ResetAfter {
				t.Errorf("%s at +%v: reset of the fresh probe %v, of one hit %v, of the probe after %v: want all equal and > 0",
					key, offset, probe.ResetAfter, hit.ResetAfter, after.ResetAfter)
			}
		}
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
