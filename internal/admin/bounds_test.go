package admin

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/operate"
)

// TestOperatorValueBounds: every number the admin API takes (a control's
// ttl and limit, a pool's capacity) at 0, at its bound, one past it and
// where it overflows: refused with a 400 that names the field, or
// accepted and listed.
func TestOperatorValueBounds(t *testing.T) {
	f, err := config.ParseRules("r.yaml", []byte(`domain: shop
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 2}
descriptors:
  - key: tenant
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1}
    throttle: {type: elastic, pool: shared, max_multiplier: 10}
  - key: user
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(set)
	bus, _ := events.NewMemBus(1, 1<<20)
	ms := counters.NewMemStore()
	c, err := checker.New(checker.Config{}, store, ms, bus, limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	New(store, nil, "tok", 1<<12, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))).WithKeys(operate.New(c, ms)).Register(mux)
	maxElastic := config.MaxRequestsPerUnit(config.ThrottleElastic)
	control := func(v, action, extra string) string {
		return fmt.Sprintf(`{"domain":"shop","descriptor":"%s","action":"%s"%s}`, v, action, extra)
	}
	steps := []struct {
		name, method, path, body string
		code                     int
		contains                 string
	}{
		{"ttl 0", "POST", "/v1/controls", control("user=a", "deny", `,"ttl":"0s"`), 201, `"action":"deny"`},
		{"ttl at the bound", "POST", "/v1/controls", control("user=b", "deny", `,"ttl":"8760h"`), 201, `"expires_unix_nanos"`},
		{"ttl past the bound", "POST", "/v1/controls", control("user=c", "deny", `,"ttl":"8760h0m0.000000001s"`), 400, "ttl: want 0 (until deleted) to 8760h0m0s"},
		{"ttl 2500000h", "POST", "/v1/controls", control("user=d", "deny", `,"ttl":"2500000h"`), 400, "ttl: want"},
		{"ttl overflowing a duration", "POST", "/v1/controls", control("user=e", "deny", `,"ttl":"9999999999h"`), 400, "ttl: want a duration"},
		{"ttl negative", "POST", "/v1/controls", control("user=f", "deny", `,"ttl":"-1s"`), 400, "ttl: want"},
		{"limit 0", "POST", "/v1/controls", control("tenant=a", "limit", `,"limit":0,"ttl":"1h"`), 201, `"action":"limit"`},
		{"limit at the bound", "POST", "/v1/controls", control("tenant=b", "limit", fmt.Sprintf(`,"limit":%d,"ttl":"1h"`, maxElastic)), 201, fmt.Sprintf(`"limit":%d`, maxElastic)},
		{"limit past the bound", "POST", "/v1/controls", control("tenant=c", "limit", fmt.Sprintf(`,"limit":%d,"ttl":"1h"`, maxElastic+1)), 400, "limit: at most"},
		{"limit 2^62", "POST", "/v1/controls", control("tenant=d", "limit", `,"limit":4611686018427387904,"ttl":"1h"`), 400, "limit: at most"},
		{"limit overflowing an int64", "POST", "/v1/controls", control("tenant=e", "limit", `,"limit":9223372036854775808,"ttl":"1h"`), 400, "limit"},
		{"capacity 0", "PUT", "/v1/pools/shop/shared", `{"requests_per_unit":0}`, 400, "requests_per_unit: want at least 1"},
		{"capacity at the bound", "PUT", "/v1/pools/shop/shared", fmt.Sprintf(`{"requests_per_unit":%d}`, int64(math.MaxInt64)), 200, fmt.Sprintf(`"capacity":%d`, int64(math.MaxInt64))},
		{"capacity overflowing an int64", "PUT", "/v1/pools/shop/shared", `{"requests_per_unit":9223372036854775808}`, 400, "requests_per_unit"},
		{"capacity negative", "PUT", "/v1/pools/shop/shared", `{"requests_per_unit":-1}`, 400, "requests_per_unit: want at least 1"},
		{"listed: the accepted ones only", "GET", "/v1/controls", "", 200, `"value":"b"`},
	}
	for i, s := range steps {
		rec := send(mux, s.method, s.path, "tok", s.body)
		if rec.Code != s.code || !strings.Contains(rec.Body.String(), s.contains) {
			t.Fatalf("step %d %s: got %d %s, want %d containing %q", i, s.name, rec.Code, rec.Body, s.code, s.contains)
		}
	}
	if cs := operate.New(c, ms).Controls(); len(cs) != 4 {
		t.Fatalf("%d controls in force, want the 4 accepted: %+v", len(cs), cs)
	}
}
