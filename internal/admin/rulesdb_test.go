package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/rulestore"
	"github.com/velvetrope/velvetrope/rulesync"
	"github.com/velvetrope/velvetrope/sink"
)

func shopDoc(limit string) string {
	return "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: " + limit + "}\n"
}

// setupDB is the admin endpoints over rule files (domain api, in a
// directory) and a memory rules store, the store's versions applied at
// once as a checker's follower applies them.
func setupDB(t *testing.T) (http.Handler, *config.Store, string, *bytes.Buffer, *sink.Memory) {
	t.Helper()
	return setupDBTokens(t, nil)
}

// setupDBTokens is setupDB with named admin tokens beside "tok".
func setupDBTokens(t *testing.T, named []config.NamedToken) (http.Handler, *config.Store, string, *bytes.Buffer, *sink.Memory) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := config.ReadRuleFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile(files)
	if err != nil {
		t.Fatal(err)
	}
	live := config.NewStore(rs)
	src := rulesync.NewSources(live, files)
	store, err := rulestore.NewMemory(rulestore.Options{History: 5})
	if err != nil {
		t.Fatal(err)
	}
	f := rulesync.NewFollower(store, src, rulesync.FollowerOptions{})
	audit := sink.NewMemory(0)
	var log bytes.Buffer
	a := New(live, []string{dir}, "tok", 1<<16, slog.New(slog.NewTextHandler(&log, nil))).WithTokens(named).
		WithRulesDB(RulesDB{Store: store, Sources: src, Apply: f.SyncDomain, MaxDocumentBytes: 1024, Audit: audit.InsertRuleChange})
	mux := http.NewServeMux()
	a.Register(mux)
	return mux, live, path, &log, audit
}

func sendH(h http.Handler, method, path, body string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer tok")
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func liveLimit(live *config.Store, domain string) int64 {
	for _, r := range live.Load().Rules() {
		if r.Domain == domain {
			return r.Limit
		}
	}
	return -1
}

// TestRulesStoreEndpoints walks a domain's life through the API: create,
// a create again (409), an unchanged push, a stale write (409 naming the
// current version), an invalid document (422, nothing stored), a file's
// domain (409 naming the file), history, one version, rollback, delete —
// and the live rules after each step.
func TestRulesStoreEndpoints(t *testing.T) {
	h, live, path, log, audit := setupDB(t)
	steps := []struct {
		method, path, body string
		headers            []string
		status             int
		want               string // in the body
		etag               string
		limit              int64 // shop's live limit after the step (-1: none)
	}{
		{"GET", "/v1/rules/shop", "", nil, 404, `no rules for domain \"shop\" in the store`, "", -1},
		{"PUT", "/v1/rules/shop?message=first", shopDoc("2"), nil, 201, `"version":1`, `"1"`, 2},
		{"PUT", "/v1/rules/shop", shopDoc("3"), nil, 409, `a PUT without If-Match only creates; send If-Match: \"1\"`, `"1"`, 2},
		{"PUT", "/v1/rules/shop", shopDoc("2"), []string{"If-Match", `"1"`}, 200, `"unchanged":true`, `"1"`, 2},
		{"PUT", "/v1/rules/shop", shopDoc("3"), []string{"If-Match", `"1"`}, 200, `"version":2`, `"2"`, 3},
		{"PUT", "/v1/rules/shop", shopDoc("4"), []string{"If-Match", `"1"`}, 409, `is at version 2, not 1`, `"2"`, 3},
		{"PUT", "/v1/rules/shop", shopDoc("fast"), []string{"If-Match", "*"}, 422, `store:shop@3:4:`, "", 3},
		{"PUT", "/v1/rules/shop", "domain: other\ndescriptors: []\n", []string{"If-Match", "*"}, 422, `the document's domain \"other\" is not the domain it is stored under`, "", 3},
		{"PUT", "/v1/rules/api", good, []string{"If-Match", "*"}, 409, `is defined in the rule file ` + path, "", 3},
		{"PUT", "/v1/rules/shop", shopDoc("5"), []string{"If-Match", "three"}, 400, `If-Match: want a version`, "", 3},
		{"PUT", "/v1/rules/shop", shopDoc("5"), []string{"If-Match", `W/"2"`}, 400, `a weak tag never matches`, "", 3},
		{"PUT", "/v1/rules/shop", shopDoc("5"), []string{"If-Match", `"02"`}, 400, `If-Match: want a version`, "", 3},
		{"PUT", "/v1/rules/%2E%2E", shopDoc("5"), nil, 400, `domain: \"..\" is not a domain name`, "", 3},
		{"PUT", "/v1/rules/shop", strings.Repeat("#", 1025), []string{"If-Match", "*"}, 413, `max_document_bytes (1024 bytes)`, "", 3},
		{"GET", "/v1/rules/shop", "", nil, 200, `"body":"domain: shop`, `"2"`, 3},
		{"GET", "/v1/rules/shop/versions/1", "", nil, 200, `requests_per_unit: 2}`, `"1"`, 3},
		{"GET", "/v1/rules/shop/versions/9", "", nil, 404, `has no version 9`, "", 3},
		{"GET", "/v1/rules/shop/history?limit=x", "", nil, 400, `limit: want a count`, "", 3},
		{"POST", "/v1/rules/shop/rollback?to=1", "", nil, 200, `"message":"rollback to version 1"`, `"3"`, 2},
		{"POST", "/v1/rules/shop/rollback?to=0", "", nil, 400, `to: want the version`, "", 2},
		{"DELETE", "/v1/rules/shop", "", []string{"If-Match", `"2"`}, 409, `is at version 3, not 2`, `"3"`, 2},
		{"DELETE", "/v1/rules/shop", "", nil, 200, `"deleted":true`, `"4"`, -1},
		{"GET", "/v1/rules/shop", "", nil, 404, `was deleted at version 4`, `"4"`, -1},
		{"DELETE", "/v1/rules/shop", "", nil, 404, `was deleted at version 4`, "", -1},
		{"POST", "/v1/rules/shop/rollback?to=4", "", nil, 422, `is a delete`, "", -1},
		{"PUT", "/v1/rules/shop", shopDoc("6"), []string{"If-Match", `"4"`}, 201, `"version":5`, `"5"`, 6},
		{"GET", "/v1/rules/a%2Fb", "", nil, 404, `no rules for domain \"a/b\"`, "", 6},
		{"PUT", "/v1/rules/a%2Fb", strings.Replace(shopDoc("1"), "shop", "a/b", 1), nil, 201, `"domain":"a/b","version":1`, `"1"`, 6},
		{"PUT", "/v1/rules/a%2Fb", strings.Replace(shopDoc("2"), "shop", "a/b", 1), []string{"If-Match", `"7"`}, 409, `(GET /v1/rules/a%2Fb)`, `"1"`, 6},
		{"PUT", "/v1/rules/shop", shopDoc("7"), []string{"Authorization", "Bearer wrong", "If-Match", "*"}, 401, `bearer token`, "", 6},
	}
	for i, st := range steps {
		rec := sendH(h, st.method, st.path, st.body, st.headers...)
		if rec.Code != st.status || !strings.Contains(rec.Body.String(), st.want) {
			t.Fatalf("step %d %s %s: %d %s; want %d with %q", i, st.method, st.path, rec.Code, rec.Body, st.status, st.want)
		}
		if st.etag != "" && rec.Header().Get("ETag") != st.etag {
			t.Fatalf("step %d: ETag %q, want %s", i, rec.Header().Get("ETag"), st.etag)
		}
		if got := liveLimit(live, "shop"); got != st.limit {
			t.Fatalf("step %d: shop's live limit %d, want %d", i, got, st.limit)
		}
		if liveLimit(live, "api") != 10 {
			t.Fatalf("step %d: the file's domain changed", i)
		}
	}
	rec := sendH(h, "GET", "/v1/rules/shop/history", "")
	var hist HistoryJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &hist); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range hist.Versions {
		got = append(got, v.Author+":"+v.Message)
		if v.Body != "" {
			t.Fatalf("a history carries bodies: %+v", v)
		}
	}
	// 5 kept of 5 versions; the first one's message
	if hist.Kept != 5 || len(hist.Versions) != 5 || got[4] != "admin:first" || got[2] != "admin:rollback to version 1" {
		t.Fatalf("history: kept %d, %v", hist.Kept, got)
	}
	// the files reloaded keep the store's domain
	if rec := send(h, "POST", "/v1/rules/reload", "tok", ""); rec.Code != 200 || liveLimit(live, "shop") != 6 {
		t.Fatalf("reload: %d %s, shop's limit %d", rec.Code, rec.Body, liveLimit(live, "shop"))
	}
	changes, err := audit.RuleChanges(context.Background(), sink.RuleChangesQuery{Domain: "shop", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, c := range changes {
		trail = append(trail, fmt.Sprintf("%s %d→%d +%d-%d", c.Action, c.From, c.Version, c.Added, c.Removed))
	}
	if want := "[put 4→5 +4-0 delete 3→4 +0-4 rollback 2→3 +1-1 put 1→2 +1-1 put 0→1 +4-0]"; fmt.Sprint(trail) != want {
		t.Fatalf("audit %v, want %s", trail, want)
	}
	if !strings.Contains(log.String(), "action=rules.put") || !strings.Contains(log.String(), "action=rules.rollback") {
		t.Fatalf("changes not audited in the log:\n%s", log)
	}
}

// TestDryRunOnClickHouse: the dry run replays real ClickHouse rows — two
// instances' rows of one key summed, another domain's and a pool's left
// out — against counts computed by hand: 5 a minute over priya's 8 then
// 4 refuses 3; bob's 9 (4 refused now) refuses 4; nobody else is matched.
func TestDryRunOnClickHouse(t *testing.T) {
	ch, err := sink.NewClickHouse(sink.ClickHouseConfig{Addr: testsvc.ClickHouse(t), Database: testsvc.Unique("dry")})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	m := time.Now().Add(-5 * time.Minute).Truncate(time.Minute).Unix()
	rows := []sink.Row{
		{Minute: m, Domain: "shop", Rule: "shop:user", Descriptor: "user=priya", Instance: "c0", Stream: 1, Version: 1, Allowed: 5},
		{Minute: m, Domain: "shop", Rule: "shop:user", Descriptor: "user=priya", Instance: "c1", Stream: 1, Version: 1, Allowed: 3},
		{Minute: m + 60, Domain: "shop", Rule: "shop:user", Descriptor: "user=priya", Instance: "c0", Stream: 1, Version: 2, Allowed: 4},
		{Minute: m, Domain: "shop", Rule: "shop:user", Descriptor: "user=bob", Instance: "c0", Stream: 2, Version: 1, Allowed: 5, Denied: 4},
		{Minute: m, Domain: "shop", Rule: "shop:ip", Descriptor: "ip=10.0.0.1", Instance: "c0", Stream: 3, Version: 1, Allowed: 7},
		{Minute: m, Domain: "web", Rule: "web:user", Descriptor: "user=priya", Instance: "c0", Stream: 4, Version: 1, Allowed: 50},
		{Minute: m, Domain: "shop", Rule: "shop:#pool:p", Descriptor: "#pool=p", Instance: "c0", Stream: 5, Version: 1, Allowed: 50, Pool: true},
	}
	ctx := context.Background()
	if err := ch.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	store, _ := rulestore.NewMemory(rulestore.Options{})
	live := config.NewStore(nil)
	New(live, nil, "tok", 1<<16, slog.New(slog.DiscardHandler)).WithRulesDB(RulesDB{Store: store,
		Sources: rulesync.NewSources(live, nil), MaxDocumentBytes: 1 << 16, Demand: ch, MaxWindow: 24 * time.Hour}).Register(mux)
	rec := sendH(mux, "POST", "/v1/rules/shop/dry-run?window=2h", shopDoc("5"))
	if rec.Code != 200 {
		t.Fatalf("dry run: %d %s", rec.Code, rec.Body)
	}
	var rep DryRunJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Keys != 3 || rep.Requests != 12+9+7 || rep.Unmatched != 7 || len(rep.Rules) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	r := rep.Rules[0]
	if r.Rule != "shop:user" || r.Requests != 21 || r.WouldDeny != 7 || r.DeniedNow != 4 || !r.Exact ||
		len(r.TopKeys) != 2 || r.TopKeys[0].Descriptor != "user=bob" || r.TopKeys[0].WouldDeny != 4 || r.TopKeys[1].WouldDeny != 3 {
		t.Fatalf("rule: %+v", r)
	}
	for _, c := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/v1/rules/shop/dry-run?window=48h", shopDoc("5"), 400, "at most 1d here"},
		{"/v1/rules/shop/dry-run", "domain: web\ndescriptors: []\n", 422, `the document's domain \"web\" is not \"shop\"`},
		{"/v1/rules/shop/dry-run", "domain: shop\ndescriptors: 3\n", 422, `dry-run:shop:2:14`},
	} {
		if rec := sendH(mux, "POST", c.path, c.body); rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Fatalf("%s: %d %s; want %d with %q", c.path, rec.Code, rec.Body, c.code, c.want)
		}
	}
}

// TestBodyAboveTheListenersBound: a body longer than http.max_body_bytes
// arrives cut when it is chunked (the listener hands a handler one byte
// more and no error): it is refused whole, naming the bound, never stored
// as the part that arrived.
func TestBodyAboveTheListenersBound(t *testing.T) {
	store, _ := rulestore.NewMemory(rulestore.Options{})
	live := config.NewStore(nil)
	mux := http.NewServeMux()
	New(live, nil, "tok", 100, slog.New(slog.DiscardHandler)).WithRulesDB(RulesDB{Store: store,
		Sources: rulesync.NewSources(live, nil), MaxDocumentBytes: 1 << 20}).Register(mux)
	body := shopDoc("5") + strings.Repeat("# padding\n", 20)
	r := httptest.NewRequest("PUT", "/v1/rules/shop", strings.NewReader(body))
	r.ContentLength = -1 // chunked
	r.Header.Set("Authorization", "Bearer tok")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, r)
	if rec.Code != 413 || !strings.Contains(rec.Body.String(), "http.max_body_bytes (100 bytes)") {
		t.Fatalf("%d %s; want 413 naming http.max_body_bytes", rec.Code, rec.Body)
	}
	if h, _ := store.Heads(context.Background()); len(h) != 0 {
		t.Fatalf("a cut document was stored: %v", h)
	}
}
