package adversarial

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Item 9 (Envoy's unit_multiplier): DAY × 213,504 answered a 20-minute
// reset and DAY × 106,752 made a negative window; a window is now at most
// a year, as in rule files, and a longer one is refused naming the field.
func TestUnitMultiplierBounded(t *testing.T) {
	p := start(t, options{})
	for _, mult := range []int{106752, 213504, 366} {
		body := fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"x"}],"limit":{"requests_per_unit":5,"unit":"DAY","unit_multiplier":%d}}]}`, mult)
		code, out := p.do(t, "POST", "/json", body)
		if code != 400 || !strings.Contains(out, "descriptors[0].limit.unit_multiplier") {
			t.Fatalf("DAY × %d: %d %s, want 400 naming descriptors[0].limit.unit_multiplier", mult, code, out)
		}
	}
	code, out := p.do(t, "POST", "/json", `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"x"}],"limit":{"requests_per_unit":5,"unit":"DAY","unit_multiplier":365}}]}`)
	if code != 200 || !strings.Contains(out, `"limitRemaining":4`) {
		t.Fatalf("DAY × 365: %d %s, want OK with 4 remaining", code, out)
	}
}

// Item 12: a rule keyed "#pool:shared" was given the id of pool "shared"
// (shop:#pool:shared, docs/design.md), so its decisions and the pool's
// were one series in metrics and analytics. The rule's id now escapes
// the ':' of its key, and the metrics keep the two apart.
func TestRuleKeyCannotNameAPool(t *testing.T) {
	p := start(t, options{rules: map[string]string{"shop.yaml": `domain: shop
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 3}
descriptors:
  - key: "#pool:shared"
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1}
    throttle: {type: elastic, pool: shared, max_multiplier: 4}
`}})
	code, out := p.do(t, "POST", "/v1/check", `{"domain":"shop","descriptors":[{"entries":[{"key":"#pool:shared","value":"x"}]}]}`)
	if code != 200 || strings.Contains(out, `"rule":"shop:#pool:shared"`) || !strings.Contains(out, `"rule":"shop:#pool\\:shared"`) {
		t.Fatalf("a rule keyed #pool:shared: %d %s, want its own id shop:#pool\\:shared, not the pool's", code, out)
	}
	if n := p.metric(t, "velvetrope_decisions_total", `rule="shop:#pool:shared"`); n != 0 {
		t.Fatalf("%v decisions counted under the pool's id shop:#pool:shared", n)
	}
}

// Item 12: wildcard matching cost patterns × value length with
// backtracking: 3,000 "*aaa…b" patterns took 1.1 s per 1 KiB value. Now
// linear: the attack value costs within a small factor of a short one on
// the same key, measured in the same run.
func TestWildcardMatchingIsLinear(t *testing.T) {
	var r strings.Builder
	r.WriteString("domain: api\ndescriptors:\n  - key: route\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n")
	for i := range 3000 {
		tail := []string{"", "*"}[i%2] // "*aaa…b": a suffix; "*aaa…b*": a search in the middle
		fmt.Fprintf(&r, "  - key: x\n    value: \"*%sb%d%s\"\n    rate_limit: {unit: second, requests_per_unit: 5}\n", strings.Repeat("a", 300), i, tail)
	}
	p := start(t, options{rules: map[string]string{"api.yaml": r.String()}})
	median := func(value string) time.Duration {
		var ds []time.Duration
		body := fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"x","value":%q}]}],"hits":0}`, value)
		for range 7 {
			t0 := time.Now()
			if code, _ := p.do(t, "POST", "/v1/check", body); code != 200 {
				t.Fatalf("check: %d", code)
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	short := median("aab")
	attack := median(strings.Repeat("a", 1000))
	if attack > 50*short+100*time.Millisecond {
		t.Fatalf("a 1 KiB value against 3,000 wildcards: %v a request, against %v for a 3-byte value (want within 50× + 100 ms)", attack, short)
	}
	t.Logf("3,000 wildcards: %v for a 1 KiB value, %v for a 3-byte one", attack, short)
}
