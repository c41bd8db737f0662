package adversarial

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// checkOnce sends one /v1/check and returns the decision and the first
// status's remaining.
func checkOnce(t *testing.T, p *proc, body string) (int, string, int64) {
	t.Helper()
	code, b := p.do(t, "POST", "/v1/check", body)
	var r struct {
		Decision string `json:"decision"`
		Statuses []struct {
			Remaining int64 `json:"remaining"`
		} `json:"statuses"`
	}
	_ = json.Unmarshal([]byte(b), &r)
	var rem int64 = -1
	if len(r.Statuses) > 0 {
		rem = r.Statuses[0].Remaining
	}
	return code, r.Decision, rem
}

// Item 1: counter keys joined entries with '|' and '=' unescaped, so a
// tenant whose value carries the separators spent another tenant's
// budget.
func TestSeparatorsInValuesDoNotShareCounters(t *testing.T) {
	p := start(t, options{rules: map[string]string{"api.yaml": `domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 5}
`}})
	req := func(tenant, route string) string {
		return fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":%q},{"key":"route","value":%q}]}]}`, tenant, route)
	}
	for i := range 5 {
		if code, d, _ := checkOnce(t, p, req("x|route=y", "z")); code != 200 || d != "allow" {
			t.Fatalf("attacker's request %d: %d %s, want 200 allow", i, code, d)
		}
	}
	code, d, rem := checkOnce(t, p, req("x", "y|route=z"))
	if code != 200 || d != "allow" || rem != 4 {
		t.Fatalf("the victim's first request: %d %s remaining %d, want allow with 4 remaining (the attacker's five requests were charged to the victim's counter)", code, d, rem)
	}
}

// Item 2: rule ids joined path parts with '/' unescaped, so {k: "a/b"}
// and {k: a} → {b} were one id: `rules validate` accepted the file, one
// rule overwrote the other in the index, and a request deferred under the
// first was delivered to the second's target.
func TestSeparatorsInRuleValuesKeepRulesApart(t *testing.T) {
	type arrival struct{ target, path string }
	got := make(chan arrival, 16)
	targetA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- arrival{"A", r.URL.Path} }))
	defer targetA.Close()
	targetB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- arrival{"B", r.URL.Path} }))
	defer targetB.Close()
	rules := fmt.Sprintf(`domain: shop
descriptors:
  - key: k
    value: "a/b"
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 1}
    on_exceed: defer
    defer: {target: %q}
  - key: k
    value: a
    descriptors:
      - key: b
        algorithm: fixed_window
        rate_limit: {unit: second, requests_per_unit: 1}
        on_exceed: defer
        defer: {target: %q}
`, targetA.URL, targetB.URL)
	p := start(t, options{rules: map[string]string{"shop.yaml": rules}})
	body := `{"domain":"shop","descriptors":[{"entries":[{"key":"k","value":"a/b"}]}],"payload":{"method":"POST","path":"/for-rule-one"}}`
	var decisions []string
	for range 2 {
		_, d, _ := checkOnce(t, p, body)
		decisions = append(decisions, d)
	}
	if decisions[1] != "defer" {
		t.Fatalf("decisions %v, want the second deferred", decisions)
	}
	select {
	case a := <-got:
		if a != (arrival{"A", "/for-rule-one"}) {
			t.Fatalf("the deferred request of rule k=a/b reached target %s at %s, want target A", a.target, a.path)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("no delivery within 15 s:\n%s", p.logs())
	}
}

// Item 1, in analytics: rows are grouped by the descriptor text, which
// joined entries with ',' and '=' unescaped, so the same two tenants were
// one row in top-denied: one tenant's refusals shown as the other's.
func TestSeparatorsInValuesDoNotShareAnalyticsRows(t *testing.T) {
	p := start(t, options{rules: map[string]string{"api.yaml": `domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 1}
`}})
	req := func(tenant, route string) string {
		return fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":%q},{"key":"route","value":%q}]}]}`, tenant, route)
	}
	for range 3 {
		checkOnce(t, p, req("x,route=y", "z"))
	}
	for range 2 {
		checkOnce(t, p, req("x", "y,route=z"))
	}
	type key struct {
		Descriptor string `json:"descriptor"`
		Denied     int    `json:"denied"`
	}
	var top struct {
		Keys []key `json:"keys"`
	}
	eventually(t, 15*time.Second, "both tenants in top-denied with their own counts", func() bool {
		_, body := p.do(t, "GET", "/v1/analytics/top-denied?window=1h&domain=api", "")
		top.Keys = nil
		_ = json.Unmarshal([]byte(body), &top)
		return len(top.Keys) == 2 && top.Keys[0].Denied == 2 && top.Keys[1].Denied == 1
	})
	if top.Keys[0].Descriptor == top.Keys[1].Descriptor {
		t.Fatalf("two tenants under one descriptor text %q", top.Keys[0].Descriptor)
	}
}

// hash_values through an Envoy limit override (found probing issue 19):
// entries that stop on a level without rate_limit match no rule, so the
// override had no hash_values to take, and the raw value reached the
// analytics. Such an override now hashes what any descriptor of the
// domain with the same key hashes.
func TestHashedValuesStayHashedThroughOverrides(t *testing.T) {
	p := start(t, options{rules: map[string]string{"t.yaml": `domain: t
descriptors:
  - key: ht
    hash_values: true
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 5}
`}})
	body := `{"domain":"t","descriptors":[{"entries":[{"key":"ht","value":"secretvalue-ov2"}],"limit":{"requests_per_unit":1,"unit":"MINUTE"}}]}`
	for range 3 {
		if code, out := p.do(t, "POST", "/json", body); code != 200 && code != 429 {
			t.Fatalf("/json: %d %s", code, out)
		}
	}
	var last string
	eventually(t, 15*time.Second, "the override's refusals in top-denied", func() bool {
		_, last = p.do(t, "GET", "/v1/analytics/top-denied?window=1h&domain=t", "")
		return strings.Contains(last, `"denied":2`)
	})
	if strings.Contains(last, "secretvalue") {
		t.Fatalf("the raw value of a hash_values key reached the analytics: %s", last)
	}
}
