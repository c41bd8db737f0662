package adversarial

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// ruleUsage reads /v1/analytics/rules and returns the allowed and denied
// decisions per rule id.
func ruleUsage(t *testing.T, p *proc) map[string][2]uint64 {
	t.Helper()
	code, body := p.do(t, "GET", "/v1/analytics/rules?window=1h", "")
	if code != 200 {
		t.Fatalf("GET /v1/analytics/rules: %d %s", code, body)
	}
	var r struct {
		Rules []struct {
			Rule    string `json:"rule"`
			Allowed uint64 `json:"allowed"`
			Denied  uint64 `json:"denied"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("analytics rules: %v: %s", err, body)
	}
	out := map[string][2]uint64{}
	for _, u := range r.Rules {
		out[u.Rule] = [2]uint64{u.Allowed, u.Denied}
	}
	return out
}

// Item 3: a `sliding_log` rule with `mode: sync` made a delta the delta
// validator did not know; the in-memory bus failed the whole batch and the
// checker kept it buffered ahead of every later delta, so dev stopped
// counting: deltas_emitted_total 0, emit errors growing, analytics empty.
func TestSlidingLogSyncDoesNotStopThePipeline(t *testing.T) {
	p := start(t, options{rules: map[string]string{"api.yaml": `domain: api
descriptors:
  - key: log
    algorithm: sliding_log
    mode: sync
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 100}
`}})
	check := func(key string) {
		t.Helper()
		body := fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":%q,"value":"v"}]}]}`, key)
		if code, b := p.do(t, "POST", "/v1/check", body); code != 200 || !strings.Contains(b, `"decision":"allow"`) {
			t.Fatalf("check %s: %d %s, want 200 allow", key, code, b)
		}
	}
	for range 3 {
		check("log") // first: its delta went ahead of everything else
	}
	for range 4 {
		check("user")
	}
	var got map[string][2]uint64
	eventually(t, 15*time.Second, "analytics showing both rules", func() bool {
		got = ruleUsage(t, p)
		return got["api:log"] == [2]uint64{3, 0} && got["api:user"] == [2]uint64{4, 0}
	})
	if n := p.metric(t, "velvetrope_checker_deltas_emitted_total"); n < 2 {
		t.Errorf("deltas_emitted_total %v, want at least 2 (one per rule)", n)
	}
	if n := p.metric(t, "velvetrope_checker_emit_errors_total"); n != 0 {
		t.Errorf("emit_errors_total %v, want 0", n)
	}
	if n := p.metric(t, "velvetrope_producer_dropped_total"); n != 0 {
		t.Errorf("producer_dropped_total %v, want 0: no delta of an accepted rule is invalid", n)
	}
	t.Logf("analytics: %v", got)
}
