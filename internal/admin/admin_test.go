package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/operate"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const good = `domain: api
descriptors:
  - key: user_id
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user}
`

func setup(t *testing.T, token string) (http.Handler, *config.Store, string, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := config.LoadRules(dir)
	if err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(rs)
	var log bytes.Buffer
	a := New(store, []string{dir}, token, 1<<16, slog.New(slog.NewTextHandler(&log, nil)))
	mux := http.NewServeMux()
	a.Register(mux)
	return mux, store, path, &log
}

func send(h http.Handler, method, path, token, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func TestRulesAndValidate(t *testing.T) {
	h, _, _, _ := setup(t, "s3cret")
	rec := send(h, "GET", "/v1/rules", "", "")
	var got RulesJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || len(got.Rules) != 1 ||
		got.Rules[0].ID != "api:user_id" || got.Rules[0].Limit != 10 || got.Rules[0].Unit != "minute" ||
		got.Rules[0].Name != "per_user" || !strings.HasSuffix(got.Rules[0].Source, "api.yaml:3:5") {
		t.Fatalf("GET /v1/rules: %d %s", rec.Code, rec.Body)
	}
	cases := []struct {
		name, body string
		code       int
		contains   string
	}{
		{"valid", good, 200, `"api:user_id"`},
		{"bad unit", "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", 422, "posted.yaml:4:"},
		{"not yaml", "domain: [", 422, "posted.yaml"},
		{"too big", strings.Repeat("#", 1<<17), 413, "body limit"},
		{"the alias cycle that crashed a process", "domain: x\ndescriptors: &d\n  - key: k\n    descriptors: *d\n", 422, "posted.yaml:4:18: alias *d refers to a node that contains it"},
	}
	for _, tok := range []string{"", "wrong"} {
		if rec := send(h, "POST", "/v1/rules/validate", tok, good); rec.Code != 401 {
			t.Fatalf("validate with token %q: got %d, want 401", tok, rec.Code)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := send(h, "POST", "/v1/rules/validate", "s3cret", c.body)
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.contains) {
				t.Fatalf("got %d %s, want %d containing %q", rec.Code, rec.Body, c.code, c.contains)
			}
		})
	}
}

func TestReloadNeedsTheToken(t *testing.T) {
	h, store, path, log := setup(t, "s3cret")
	if err := os.WriteFile(path, []byte(strings.Replace(good, "10", "20", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "wrong"} {
		if rec := send(h, "POST", "/v1/rules/reload", tok, ""); rec.Code != 401 || rec.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("token %q: %d", tok, rec.Code)
		}
	}
	if store.Load().Rules()[0].Limit != 10 {
		t.Fatal("an unauthorized reload changed the rules")
	}
	if rec := send(h, "POST", "/v1/rules/reload", "s3cret", ""); rec.Code != 200 || store.Load().Rules()[0].Limit != 20 {
		t.Fatalf("reload: %d %s, limit %d", rec.Code, rec.Body, store.Load().Rules()[0].Limit)
	}
	// a broken file is refused and the live rules stay
	if err := os.WriteFile(path, []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := send(h, "POST", "/v1/rules/reload", "s3cret", "")
	if rec.Code != 422 || !strings.Contains(rec.Body.String(), "api.yaml:4:") || store.Load().Rules()[0].Limit != 20 {
		t.Fatalf("broken reload: %d %s", rec.Code, rec.Body)
	}
	out := log.String()
	if !strings.Contains(out, "action=rules.reload") || !strings.Contains(out, "bad or missing bearer token") ||
		!strings.Contains(out, "status=422") || strings.Contains(out, "s3cret") {
		t.Fatalf("audit log:\n%s", out)
	}
}

func TestStateChangesDisabledWithoutToken(t *testing.T) {
	h, _, _, _ := setup(t, "")
	if rec := send(h, "POST", "/v1/rules/reload", "anything", ""); rec.Code != 403 || !strings.Contains(rec.Body.String(), "VELVETROPE_ADMIN_TOKEN") {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
}

func TestReloadOfBuiltInRules(t *testing.T) {
	rs, err := config.ExampleRules()
	if err != nil {
		t.Fatal(err)
	}
	a := New(config.NewStore(rs), nil, "t", 1<<16, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
	mux := http.NewServeMux()
	a.Register(mux)
	if rec := send(mux, "POST", "/v1/rules/reload", "t", ""); rec.Code != 409 {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
}

func TestInspectKeys(t *testing.T) {
	rs, err := config.LoadRules("../../config/testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(rs)
	bus, err := events.NewMemBus(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ms := counters.NewMemStore()
	c, err := checker.New(checker.Config{}, store, ms, bus, limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	var d ratelimit.Decision
	if err := c.Check(context.Background(), &ratelimit.Request{Domain: "rl", Hits: 1, Descriptors: []ratelimit.Descriptor{
		{Entries: []config.Entry{{Key: "foo", Value: "a"}}}}}, &d); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	mux := http.NewServeMux()
	New(store, nil, "tok", 1<<16, slog.New(slog.NewTextHandler(&log, nil))).WithKeys(operate.New(c, ms)).Register(mux)
	cases := []struct {
		name, query, token string
		code               int
		contains           string
	}{
		{"no token", "domain=rl&descriptor=foo=a", "", 401, "bearer token"},
		{"known key", "domain=rl&descriptor=foo=a", "tok", 200, `"mine":1`},
		{"no such key yet", "domain=rl&descriptor=foo=b", "tok", 200, `"global":{"found":false`},
		{"bad descriptor", "domain=rl&descriptor=foo", "tok", 400, "has no '='"},
		{"no domain", "descriptor=foo=a", "tok", 400, "domain: must not be empty"},
		{"unknown domain", "domain=nope&descriptor=foo=a", "tok", 400, "unknown domain"},
		{"no rule", "domain=rl&descriptor=zzz=a", "tok", 400, "no rule matches"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := send(mux, "GET", "/v1/keys?"+tc.query, tc.token, "")
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.contains) {
				t.Fatalf("got %d %s, want %d containing %q", rec.Code, rec.Body, tc.code, tc.contains)
			}
		})
	}
	if !strings.Contains(log.String(), "action=keys.inspect") {
		t.Fatalf("not audited:\n%s", log.String())
	}
}

// TestKeyControls: operators deny, allow and limit one key, list and
// delete controls, and reset a counter — token-protected, audited, with
// errors naming the field.
func TestKeyControls(t *testing.T) {
	rs, err := config.ParseRules("r.yaml", []byte(`domain: api
descriptors:
  - key: user
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api_key
    hash_values: true
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := config.Compile([]*config.File{rs})
	if err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(set)
	bus, err := events.NewMemBus(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ms := counters.NewMemStore()
	c, err := checker.New(checker.Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}}, store, ms, bus, limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	mux := http.NewServeMux()
	New(store, nil, "tok", 1<<12, slog.New(slog.NewTextHandler(&log, nil))).WithKeys(operate.New(c, ms)).Register(mux)
	decide := func(k, v string) ratelimit.Code {
		var d ratelimit.Decision
		if err := c.Check(context.Background(), &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{
			{Entries: []config.Entry{{Key: k, Value: v}}}}}, &d); err != nil {
			t.Fatal(err)
		}
		return d.Code
	}

	steps := []struct {
		name, method, path, token, body string
		code                            int
		contains                        string
	}{
		{"no token", "POST", "/v1/controls", "", `{"domain":"api","descriptor":"user=priya","action":"deny"}`, 401, "bearer token"},
		{"deny", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=priya","action":"deny","reason":"abuse"}`, 201, `"action":"deny"`},
		{"listed", "GET", "/v1/controls", "tok", "", 200, `"reason":"abuse"`},
		{"inspect shows it", "GET", "/v1/keys?domain=api&descriptor=user=priya", "tok", "", 200, `"control":{`},
		{"bad action", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=a","action":"block"}`, 400, "action: want"},
		{"bad ttl", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=a","action":"allow","ttl":"soon"}`, 400, "ttl:"},
		{"limit without ttl", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=a","action":"limit","limit":9}`, 400, "ttl:"},
		{"unknown field", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=a","action":"allow","tll":"1m"}`, 400, `tll: unknown field`},
		{"other case", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=a","action":"deny","Action":"allow"}`, 400, `Action: unknown field (names are case-sensitive: the field is \"action\")`},
		{"duplicate", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=a","action":"allow","action":"deny"}`, 400, `action: duplicate field`},
		{"lone surrogate", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=a","action":"deny","reason":"\udc01"}`, 400, `reason: a lone UTF-16 surrogate`},
		{"invalid UTF-8", "POST", "/v1/keys/reset", "tok", "{\"domain\":\"api\",\"entries\":[{\"key\":\"user\",\"value\":\"\xe2\x82\"}]}", 400, `entries[0].value: not valid UTF-8`},
		{"both forms", "POST", "/v1/controls", "tok", `{"domain":"api","descriptor":"user=a","entries":[{"key":"user","value":"a"}],"action":"allow"}`, 400, "not both"},
		{"no domain", "POST", "/v1/keys/reset", "tok", `{"descriptor":"user=a"}`, 400, "domain: must not be empty"},
		{"too big", "POST", "/v1/controls", "tok", `{"reason":"` + strings.Repeat("x", 5000) + `"}`, 413, "body: larger than"},
		{"hashed key", "POST", "/v1/controls", "tok", `{"domain":"api","entries":[{"key":"api_key","value":"sk_live_SECRET"}],"action":"deny"}`, 201, `"key":"api_key"`},
		{"delete unknown", "DELETE", "/v1/controls/nope", "tok", "", 404, "no control"},
	}
	for _, st := range steps {
		rec := send(mux, st.method, st.path, st.token, st.body)
		if rec.Code != st.code || !strings.Contains(rec.Body.String(), st.contains) {
			t.Fatalf("%s: got %d %s, want %d containing %q", st.name, rec.Code, rec.Body, st.code, st.contains)
		}
		if st.name == "hashed key" && strings.Contains(rec.Body.String(), "SECRET") {
			t.Fatalf("a hashed value came back raw: %s", rec.Body)
		}
	}
	if decide("user", "priya") != ratelimit.OverLimit || decide("user", "other") != ratelimit.OK {
		t.Fatal("the deny must refuse priya only")
	}
	if decide("api_key", "sk_live_SECRET") != ratelimit.OverLimit {
		t.Fatal("the hashed deny must refuse the raw key")
	}
	var list ControlsJSON
	if err := json.Unmarshal(send(mux, "GET", "/v1/controls", "tok", "").Body.Bytes(), &list); err != nil || len(list.Controls) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	for _, ct := range list.Controls {
		if rec := send(mux, "DELETE", "/v1/controls/"+ct.ID, "tok", ""); rec.Code != 200 {
			t.Fatalf("delete: %d %s", rec.Code, rec.Body)
		}
	}
	// Exhaust, then reset.
	for decide("user", "priya") == ratelimit.OK {
	}
	rec := send(mux, "POST", "/v1/keys/reset", "tok", `{"domain":"api","descriptor":"user=priya"}`)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"scope":"all checkers"`) {
		t.Fatalf("reset: %d %s", rec.Code, rec.Body)
	}
	if decide("user", "priya") != ratelimit.OK {
		t.Fatal("a reset key must admit again")
	}
	for _, want := range []string{"action=controls.set", "action=controls.delete", "action=keys.reset", `reason=\"abuse\"`} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("audit log lacks %s:\n%s", want, log.String())
		}
	}
	if strings.Contains(log.String(), "SECRET") || strings.Contains(log.String(), "tok") && strings.Contains(log.String(), "Bearer") {
		t.Fatalf("the audit log leaks a secret:\n%s", log.String())
	}
}

// TestPools: PUT sets a pool's capacity (an elastic tenant borrows up to
// it at once), GET lists capacity and use, DELETE returns it to the
// file's value; token-protected, audited, errors naming what is wrong.
func TestPools(t *testing.T) {
	f, err := config.ParseRules("r.yaml", []byte(`domain: shop
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 2}
descriptors:
  - key: tenant
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1}
    throttle: {type: elastic, pool: shared, max_multiplier: 10}
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
	var log bytes.Buffer
	mux := http.NewServeMux()
	New(store, nil, "tok", 1<<12, slog.New(slog.NewTextHandler(&log, nil))).WithKeys(operate.New(c, ms)).Register(mux)
	admitted := func() int {
		n := 0
		for range 20 {
			var d ratelimit.Decision
			if err := c.Check(context.Background(), &ratelimit.Request{Domain: "shop", Hits: 1, Descriptors: []ratelimit.Descriptor{
				{Entries: []config.Entry{{Key: "tenant", Value: "acme"}}}}}, &d); err != nil {
				t.Fatal(err)
			}
			if d.Allowed() {
				n++
			}
		}
		return n
	}
	if n := admitted(); n != 3 {
		t.Fatalf("limit 1 and a pool of 2: admitted %d, want 3", n)
	}
	steps := []struct {
		method, path, token, body string
		code                      int
		contains                  string
	}{
		{"PUT", "/v1/pools/shop/shared", "", `{"requests_per_unit": 5}`, 401, "bearer token"},
		{"PUT", "/v1/pools/shop/nope", "tok", `{"requests_per_unit": 5}`, 404, `no pool \"nope\"`},
		{"PUT", "/v1/pools/shop/shared", "tok", `{"requests_per_unit": 0}`, 400, "requests_per_unit"},
		{"PUT", "/v1/pools/shop/shared", "tok", `{}`, 400, "requests_per_unit: required"},
		{"PUT", "/v1/pools/shop/shared", "tok", `{"Requests_Per_Unit": 5}`, 400, "Requests_Per_Unit: unknown field"},
		{"PUT", "/v1/pools/shop/shared", "tok", `{"requests_per_unit": 5, "requests_per_unit": 9}`, 400, "requests_per_unit: duplicate field"},
		{"PUT", "/v1/pools/shop/shared", "tok", `{"requests_per_unit": 5.5}`, 400, "requests_per_unit: want an integer, got 5.5"},
		{"PUT", "/v1/pools/shop/shared", "tok", `{"requests_per_unit": 5}`, 200, `"capacity":5`},
		{"GET", "/v1/pools", "tok", "", 200, `"file_capacity":2,"override":true`},
	}
	for i, s := range steps {
		rec := send(mux, s.method, s.path, s.token, s.body)
		if rec.Code != s.code || !strings.Contains(rec.Body.String(), s.contains) {
			t.Fatalf("step %d %s %s: got %d %s, want %d containing %q", i, s.method, s.path, rec.Code, rec.Body, s.code, s.contains)
		}
	}
	if n := admitted(); n != 3 {
		t.Fatalf("pool raised to 5 (2 used): admitted %d more, want 3", n)
	}
	if rec := send(mux, "DELETE", "/v1/pools/shop/shared", "tok", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"had_override":true`) {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	if rec := send(mux, "GET", "/v1/pools", "tok", ""); !strings.Contains(rec.Body.String(), `"capacity":2,"file_capacity":2,"override":false`) {
		t.Fatalf("after delete: %s", rec.Body)
	}
	if !strings.Contains(log.String(), "action=pools.set") || !strings.Contains(log.String(), "action=pools.reset") {
		t.Fatalf("not audited:\n%s", log.String())
	}
}
