package analytics

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/sink"
)

var now = time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)

// seeded is a handler over a memory store holding: priya denied 20 and
// allowed 10 in the last hour, bob denied 5, carol never denied, and an
// old row of 2 hours ago; in domain web a key deferred, a shadow rule's
// key nobody refused, admissions over a soft limit and borrowing from
// pool spare, whose own row says what it lent and refused.
func seeded(t testing.TB) http.Handler {
	t.Helper()
	mem := sink.NewMemory(0)
	mem.SetClock(func() time.Time { return now }) // the rows' own day, whatever today is
	min := func(ago time.Duration) int64 { return now.Add(-ago).Truncate(time.Minute).Unix() }
	rows := []sink.Row{
		{Minute: min(10 * time.Minute), Domain: "api", Rule: "api:user_id", Descriptor: "user_id=priya", Instance: "c/1", Stream: 1, Version: 5, Allowed: 6, Denied: 12},
		{Minute: min(5 * time.Minute), Domain: "api", Rule: "api:user_id", Descriptor: "user_id=priya", Instance: "c/2", Stream: 1, Version: 9, Allowed: 4, Denied: 8},
		{Minute: min(5 * time.Minute), Domain: "api", Rule: "api:user_id", Descriptor: "user_id=bob", Instance: "c/1", Stream: 2, Version: 6, Allowed: 1, Denied: 5},
		{Minute: min(3 * time.Minute), Domain: "api", Rule: "api:ip", Descriptor: "ip=10.0.0.1", Instance: "c/1", Stream: 3, Version: 7, Allowed: 30},
		{Minute: min(2 * time.Hour), Domain: "api", Rule: "api:user_id", Descriptor: "user_id=old", Instance: "c/1", Stream: 4, Version: 1, Denied: 99},
		{Minute: min(4 * time.Minute), Domain: "web", Rule: "web:path", Descriptor: "path=/x", Instance: "c/1", Stream: 5, Version: 8, Denied: 1, Deferred: 2},
		{Minute: min(4 * time.Minute), Domain: "web", Rule: "web:tenant", Descriptor: "tenant=t", Instance: "c/1", Stream: 6, Version: 10, Allowed: 2, ShadowDenied: 3},
		{Minute: min(4 * time.Minute), Domain: "web", Rule: "web:soft", Descriptor: "soft=s", Instance: "c/1", Stream: 7, Version: 11, Allowed: 4, OverSoft: 1, Denied: 1},
		{Minute: min(4 * time.Minute), Domain: "web", Rule: "web:team", Descriptor: "team=x", Instance: "c/1", Stream: 8, Version: 12, Allowed: 5, Elastic: 2, Denied: 3},
		{Minute: min(4 * time.Minute), Domain: "web", Rule: "web:#pool:spare", Descriptor: "#pool=spare", Instance: "c/1", Stream: 9, Version: 13,
			Allowed: 2, AllowedCost: 2, Denied: 3, Pool: true},
	}
	if err := mem.Insert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	for i, d := range []string{"api", "web", "api"} {
		if err := mem.InsertRuleChange(context.Background(), sink.RuleChange{Time: now.Add(-time.Duration(3-i) * 24 * time.Hour),
			Domain: d, Version: int64(i/2 + 1), From: int64(i / 2), Action: "put", Author: "admin", Message: "m", Added: 4, Bytes: 90,
			Instance: "c/1"}); err != nil {
			t.Fatal(err)
		}
	}
	h := New(mem, "", nil).WithRuleChanges(mem)
	h.now = func() time.Time { return now }
	mux := http.NewServeMux()
	h.Register(mux)
	return mux
}

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

func TestEndpoints(t *testing.T) {
	h := seeded(t)
	tests := []struct {
		path string
		code int
		want string // exact body (JSON, one line)
	}{
		{"/v1/analytics/top-denied?window=1h&limit=10&domain=api", 200,
			`{"window":"1h","keys":[{"domain":"api","rule":"api:user_id","descriptor":"user_id=priya","denied":20,"allowed":10,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0},` +
				`{"domain":"api","rule":"api:user_id","descriptor":"user_id=bob","denied":5,"allowed":1,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0}]}`},
		{"/v1/analytics/top-denied?limit=1", 200,
			`{"window":"1h","keys":[{"domain":"api","rule":"api:user_id","descriptor":"user_id=priya","denied":20,"allowed":10,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0}]}`},
		{"/v1/analytics/top-denied?window=3h&limit=1", 200,
			`{"window":"3h","keys":[{"domain":"api","rule":"api:user_id","descriptor":"user_id=old","denied":99,"allowed":0,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0}]}`},
		{"/v1/analytics/top-denied?domain=web&rule=web:path", 200,
			`{"window":"1h","keys":[{"domain":"web","rule":"web:path","descriptor":"path=/x","denied":1,"allowed":0,"deferred":2,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0}]}`},
		{"/v1/analytics/top-denied?domain=nobody", 200, `{"window":"1h","keys":[]}`},
		// issue 20: every count apart; the pool is no key, and the shadow
		// rule's key, refused by nobody, is no denied key
		{"/v1/analytics/top-denied?domain=web", 200, `{"window":"1h","keys":[` +
			`{"domain":"web","rule":"web:team","descriptor":"team=x","denied":3,"allowed":5,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":2,"late":0},` +
			`{"domain":"web","rule":"web:path","descriptor":"path=/x","denied":1,"allowed":0,"deferred":2,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0},` +
			`{"domain":"web","rule":"web:soft","descriptor":"soft=s","denied":1,"allowed":4,"deferred":0,"shadow_denied":0,"over_soft":1,"elastic":0,"late":0}]}`},
		{"/v1/analytics/rules?domain=web", 200, `{"window":"1h","rules":[` +
			`{"domain":"web","rule":"web:path","allowed":0,"denied":1,"deferred":2,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0,"deny_rate":0.3333333333333333},` +
			`{"domain":"web","rule":"web:soft","allowed":4,"denied":1,"deferred":0,"shadow_denied":0,"over_soft":1,"elastic":0,"late":0,"deny_rate":0.2},` +
			`{"domain":"web","rule":"web:team","allowed":5,"denied":3,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":2,"late":0,"deny_rate":0.375},` +
			`{"domain":"web","rule":"web:tenant","allowed":2,"denied":0,"deferred":0,"shadow_denied":3,"over_soft":0,"elastic":0,"late":0,"deny_rate":0}]}`},
		{"/v1/analytics/usage?domain=web&key=%23pool%3Dspare", 200, `{"window":"1h","domain":"web","key":"#pool=spare","minutes":[]}`},
		{"/v1/analytics/pools", 200, `{"window":"1h","pools":[` +
			`{"domain":"web","pool":"spare","rule":"web:#pool:spare","borrowed":2,"borrowed_hits":2,"refused":3}]}`},
		{"/v1/analytics/pools?window=15m&domain=api", 200, `{"window":"15m","pools":[]}`},
		{"/v1/analytics/pools?rule=x", 400, `{"error":"rule: unknown parameter (want window, domain)"}`},
		{"/v1/analytics/rule-changes?domain=api", 200, `{"window":"7d","changes":[` +
			`{"time":"2026-11-29T12:00:30Z","domain":"api","version":2,"from_version":1,"action":"put","author":"admin","message":"m","added":4,"removed":0,"bytes":90,"instance":"c/1"},` +
			`{"time":"2026-11-27T12:00:30Z","domain":"api","version":1,"from_version":0,"action":"put","author":"admin","message":"m","added":4,"removed":0,"bytes":90,"instance":"c/1"}]}`},
		{"/v1/analytics/rule-changes?window=2d&limit=1", 200, `{"window":"2d","changes":[` +
			`{"time":"2026-11-29T12:00:30Z","domain":"api","version":2,"from_version":1,"action":"put","author":"admin","message":"m","added":4,"removed":0,"bytes":90,"instance":"c/1"}]}`},
		{"/v1/analytics/rule-changes?window=1h", 200, `{"window":"1h","changes":[]}`},
		{"/v1/analytics/rule-changes?rule=x", 400, `{"error":"rule: unknown parameter (want window, domain, limit)"}`},
		{"/v1/analytics/rules?window=1h&domain=api", 200,
			`{"window":"1h","rules":[{"domain":"api","rule":"api:ip","allowed":30,"denied":0,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0,"deny_rate":0},` +
				`{"domain":"api","rule":"api:user_id","allowed":11,"denied":25,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":0,"late":0,"deny_rate":0.6944444444444444}]}`},
		{"/v1/analytics/usage?domain=api&key=user_id%3Dpriya&window=6h", 200,
			`{"window":"6h","domain":"api","key":"user_id=priya","minutes":[` +
				`{"minute":"2026-11-30T11:50:00Z","allowed":6,"denied":12,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":0,"allowed_cost":0,"denied_cost":0,"late":0,"late_cost":0},` +
				`{"minute":"2026-11-30T11:55:00Z","allowed":4,"denied":8,"deferred":0,"shadow_denied":0,"over_soft":0,"elastic":0,"allowed_cost":0,"denied_cost":0,"late":0,"late_cost":0}]}`},
		// refused, naming the parameter
		{"/v1/analytics/top-denied?window=soon", 400, `{"error":"window: want a duration such as 15m, 6h or 7d, got \"soon\""}`},
		{"/v1/analytics/top-denied?window=30s", 400, `{"error":"window: want 1m to 7d, got 30s"}`},
		{"/v1/analytics/top-denied?window=40d", 400, `{"error":"window: at most 7d here (analytics.max_window), got 40d"}`},
		{"/v1/analytics/top-denied?limit=0", 400, `{"error":"limit: want a whole number from 1 to 1000, got \"0\""}`},
		{"/v1/analytics/top-denied?limit=ten", 400, `{"error":"limit: want a whole number from 1 to 1000, got \"ten\""}`},
		{"/v1/analytics/top-denied?limt=5", 400, `{"error":"limt: unknown parameter (want window, limit, domain, rule)"}`},
		{"/v1/analytics/top-denied?domain=a&domain=b", 400, `{"error":"domain: given more than once"}`},
		{"/v1/analytics/usage?domain=api", 400, `{"error":"key: required, the descriptor as key=value[,key2=value2]"}`},
		{"/v1/analytics/usage?key=user_id%3Dpriya", 400, `{"error":"domain: required"}`},
		{"/v1/analytics/usage?domain=api&key=priya", 400, `{"error":"key: want key=value[,key2=value2], got \"priya\""}`},
		{"/v1/analytics/rules?domain=%ff", 400, `{"error":"domain: must be valid UTF-8 of at most 1024 bytes"}`},
	}
	for _, tc := range tests {
		rec := get(h, tc.path)
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != tc.code || got != tc.want {
			t.Errorf("%s:\n got %d %s\nwant %d %s", tc.path, rec.Code, got, tc.code, tc.want)
		}
	}
	// the timeline sums everything per minute, in order
	var tl httpjson.Timeline
	if err := json.Unmarshal(get(h, "/v1/analytics/timeline?window=1h").Body.Bytes(), &tl); err != nil {
		t.Fatal(err)
	}
	var allowed, denied uint64
	for i, m := range tl.Minutes {
		allowed += m.Allowed
		denied += m.Denied
		if i > 0 && !m.Minute.After(tl.Minutes[i-1].Minute) {
			t.Fatal("timeline out of order")
		}
	}
	if len(tl.Minutes) != 4 || allowed != 41+11 || denied != 26+4 { // the pool's row is not requests
		t.Fatalf("timeline: %+v", tl)
	}
}

func TestAnalyticsOff(t *testing.T) {
	mux := http.NewServeMux()
	New(nil, "analytics are off: set VELVETROPE_CLICKHOUSE_ADDR", nil).Register(mux)
	rec := get(mux, "/v1/analytics/top-denied")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "VELVETROPE_CLICKHOUSE_ADDR") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	// input is still checked first
	if rec := get(mux, "/v1/analytics/top-denied?window=x"); rec.Code != 400 {
		t.Fatalf("bad window with analytics off: %d", rec.Code)
	}
}

func FuzzQuery(f *testing.F) {
	for _, s := range []string{"window=1h&limit=10&domain=api", "window=7d", "limit=-1", "window=%ff", "key=a%3Db&domain=x", "a=1&a=2"} {
		f.Add(s)
	}
	h := seeded(f)
	f.Fuzz(func(t *testing.T, q string) {
		for _, path := range []string{"/v1/analytics/top-denied", "/v1/analytics/usage", "/v1/analytics/rules", "/v1/analytics/timeline", "/v1/analytics/pools",
			"/v1/analytics/rule-changes"} {
			req := httptest.NewRequest("GET", path, nil)
			req.URL.RawQuery = q // whatever bytes a client sends
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != 200 && rec.Code != 400 {
				t.Fatalf("%s?%s: %d %s", path, q, rec.Code, rec.Body)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("%s?%s: not JSON: %s", path, q, rec.Body)
			}
			if rec.Code == 400 && !strings.Contains(body["error"].(string), ":") {
				t.Fatalf("%s?%s: an error that names nothing: %s", path, q, rec.Body)
			}
		}
	})
}

// gated holds every query until release is closed.
type gated struct {
	sink.Analytics
	entered chan struct{}
	release chan struct{}
}

func (g gated) Timeline(ctx context.Context, q sink.TimelineQuery) ([]sink.MinuteUsage, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Analytics.Timeline(ctx, q)
}

// TestAccess: issue 10, item 8. Before, anyone reaching the port read who
// was being limited, over 31-day scans, with no bound on queries at once.
func TestAccess(t *testing.T) {
	g := gated{Analytics: sink.NewMemory(0), entered: make(chan struct{}, 8), release: make(chan struct{})}
	h := New(g, "", nil).WithAccess(Access{Token: "t0k", MaxWindow: 24 * time.Hour, MaxConcurrent: 2})
	mux := http.NewServeMux()
	h.Register(mux)
	call := func(path, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		return rec
	}
	steps := []struct {
		path, token string
		code        int
		contains    string
	}{
		{"/v1/analytics/top-denied", "", 401, "bearer token"},
		{"/v1/analytics/top-denied", "wrong", 401, "bearer token"},
		{"/v1/analytics/rules?window=2d", "t0k", 400, "window: at most 1d here (analytics.max_window), got 2d"},
		{"/v1/analytics/top-denied?window=24h", "t0k", 200, `"keys"`},
	}
	for i, s := range steps {
		if rec := call(s.path, s.token); rec.Code != s.code || !strings.Contains(rec.Body.String(), s.contains) {
			t.Fatalf("step %d: got %d %s, want %d containing %q", i, rec.Code, rec.Body, s.code, s.contains)
		}
	}
	// two queries hold both slots; a third is refused at once, not queued
	done := make(chan int, 2)
	for range 2 {
		go func() { done <- call("/v1/analytics/timeline", "t0k").Code }()
	}
	<-g.entered
	<-g.entered
	rec := call("/v1/analytics/timeline", "t0k")
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "analytics.max_concurrent") {
		t.Fatalf("third query: %d %s, want 503", rec.Code, rec.Body)
	}
	close(g.release)
	for range 2 {
		if code := <-done; code != 200 {
			t.Fatalf("held query answered %d", code)
		}
	}
	if rec := call("/v1/analytics/timeline", "t0k"); rec.Code != 200 {
		t.Fatalf("after release: %d", rec.Code)
	}
}
