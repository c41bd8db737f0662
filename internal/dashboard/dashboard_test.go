package dashboard

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/analytics"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/sink"
)

func TestServesThePage(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") ||
		!strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	// Nothing is loaded from elsewhere: no absolute URL in any src or href.
	if m := regexp.MustCompile(`(src|href)=["']?(https?:)?//`).FindString(body); m != "" {
		t.Fatalf("the page loads from another origin: %s", m)
	}
	for _, want := range []string{"/v1/analytics/timeline", "/v1/analytics/top-denied", "/v1/analytics/rules", "setInterval"} {
		if !strings.Contains(body, want) {
			t.Fatalf("the page does not use %s", want)
		}
	}
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/other", nil))
	if rec.Code != 404 {
		t.Fatalf("GET /other: %d, want 404 (the page is served at the root only)", rec.Code)
	}
}

// TestDashboardInChromium opens the page in headless Chromium against the
// analytics API over a seeded ClickHouse, checks from the rendered DOM that
// the charts show the seeded data, and saves a screenshot in the test's
// artifact directory (`go test -artifacts` keeps it).
func TestDashboardInChromium(t *testing.T) {
	chromium := testsvc.Chromium(t)
	ch, err := sink.NewClickHouse(sink.ClickHouseConfig{Addr: testsvc.ClickHouse(t), Database: testsvc.Unique("dash")})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	now := time.Now().UTC().Truncate(time.Minute)
	at := func(ago int) int64 { return now.Add(-time.Duration(ago) * time.Minute).Unix() }
	var rows []sink.Row
	for i := range 30 { // half an hour of traffic, denials growing
		rows = append(rows,
			sink.Row{Minute: at(i), Domain: "api", Rule: "api:user_id", Descriptor: "user_id=priya", Instance: "c/1", Stream: 1,
				Version: uint64(100 - i), Allowed: 2, Denied: uint64(30 - i)},
			sink.Row{Minute: at(i), Domain: "api", Rule: "api:remote_address", Descriptor: "remote_address=203.0.113.7",
				Instance: "c/2", Stream: 2, Version: uint64(200 - i), Allowed: 40, Denied: uint64(i % 3), Deferred: 1})
	}
	rows = append(rows, sink.Row{Minute: at(3), Domain: "api", Rule: "api:user_id", Descriptor: "user_id=bob",
		Instance: "c/1", Stream: 3, Version: 300, Allowed: 5, Denied: 7},
		// issue 20: a shadow rule nobody was refused by, admissions over a
		// soft limit and borrowing, and the pool lent from, which refused
		// more than anyone: it is no key
		sink.Row{Minute: at(1), Domain: "api", Rule: "api:tenant/route=/export", Descriptor: "tenant=acme,route=/export",
			Instance: "c/1", Stream: 4, Version: 301, Allowed: 2, ShadowDenied: 3},
		sink.Row{Minute: at(2), Domain: "api", Rule: "api:soft", Descriptor: "soft=s", Instance: "c/1", Stream: 5, Version: 302,
			Allowed: 7, OverSoft: 2, Denied: 2},
		sink.Row{Minute: at(2), Domain: "api", Rule: "api:team", Descriptor: "team=x", Instance: "c/1", Stream: 6, Version: 303,
			Allowed: 9, Elastic: 4, Denied: 1},
		sink.Row{Minute: at(2), Domain: "api", Rule: "api:#pool:p", Descriptor: "#pool=p", Instance: "c/1", Stream: 7, Version: 304,
			Allowed: 4, AllowedCost: 6, Denied: 500, Pool: true})
	if err := ch.Insert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	changeAt := time.Unix(at(7), 0).UTC()
	if err := ch.InsertRuleChange(context.Background(), sink.RuleChange{Time: changeAt, Domain: "api", Version: 3, From: 2,
		Action: "rollback", Author: "admin", Message: "<b>back</b> to 2", Added: 1, Removed: 2, Bytes: 80, Instance: "c0"}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	analytics.New(ch, "", nil).WithRuleChanges(ch).Register(mux)
	Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	// the same data behind analytics.token: the page asks for the token
	locked := http.NewServeMux()
	analytics.New(ch, "", nil).WithAccess(analytics.Access{Token: "s3cret"}).Register(locked)
	Register(locked)
	lockedSrv := httptest.NewServer(locked)
	defer lockedSrv.Close()

	browseURL := func(url string, extra ...string) []byte {
		t.Helper()
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
			"--user-data-dir=" + t.TempDir(), "--window-size=1280,1000", "--virtual-time-budget=8000"}, extra...)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, chromium, append(args, url+"/")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
		}
		return out
	}
	browse := func(extra ...string) []byte { t.Helper(); return browseURL(srv.URL, extra...) }
	if dom := string(browseURL(lockedSrv.URL, "--dump-dom")); !strings.Contains(dom, `<label id="tokenbox">`) ||
		!strings.Contains(dom, `data-state="error">enter the analytics token`) || strings.Contains(dom, "user_id=priya") {
		t.Fatalf("behind a token the page must ask for it and show nothing:\n%s", dom)
	}
	dom := string(browse("--dump-dom"))
	for _, want := range []string{
		`id="status" data-state="ready"`,
		`data-points="30"`, // one bar group per minute with traffic
		`allowed 1,283 · denied 505 · deferred 30 · shadow-denied 3 · of the allowed, over soft limits 2 and borrowing 4`,
		`data-key="user_id=priya"`,
		`data-rule="api:user_id" data-rate="0.8790"`,              // 472 denied of 537
		`data-rule="api:tenant/route=/export" data-rate="0.0000"`, // 3 shadow-denied of 5: nobody refused
		`data-shadow="3"`,
	} {
		if !strings.Contains(dom, want) {
			t.Fatalf("the rendered page lacks %q:\n%s", want, dom)
		}
	}
	for _, tc := range []struct{ table, want string }{
		{"top", `<tbody data-rows="5">`}, // priya, the address, bob, soft, team: neither the pool nor the shadow rule's key
		{"top", `<tr data-key="soft=s"><td class="key" title="api soft=s">soft=s</td><td title="api:soft">api:soft</td><td class="n">2</td><td class="n">7</td><td class="n">0</td><td class="n">0</td><td class="n">2</td><td class="n">0</td>`},
		{"top", `<tr data-key="team=x"><td class="key" title="api team=x">team=x</td><td title="api:team">api:team</td><td class="n">1</td><td class="n">9</td><td class="n">0</td><td class="n">0</td><td class="n">0</td><td class="n">4</td>`},
		{"rules", `<td>api:tenant/route=/export</td><td class="n">0</td><td class="n">3</td><td class="n">5</td><td class="n">0.0 %</td>`},
		{"pools", `<tbody data-rows="1"><tr data-pool="p" data-domain="api"><td class="key">p</td><td>api</td><td class="n">4</td><td class="n">6</td><td class="n">500</td></tr>`},
		{"changes", `<tbody data-rows="1"><tr data-domain="api" data-version="3"><td>` + changeAt.Format("2006-01-02 15:04:05") +
			`</td><td class="key">api</td><td class="n">2 → 3</td><td>rollback</td><td>admin</td><td class="n">+1 −2</td><td title="c0">&lt;b&gt;back&lt;/b&gt; to 2</td></tr>`},
	} {
		if sec := table(dom, tc.table); !strings.Contains(sec, tc.want) {
			t.Fatalf("table %s lacks %q:\n%s", tc.table, tc.want, sec)
		}
	}
	if strings.Contains(table(dom, "top"), "#pool") || strings.Contains(table(dom, "rules"), "#pool") {
		t.Fatalf("the pool is listed as a key or a rule:\n%s", dom)
	}
	if i, j := strings.Index(dom, `data-key="user_id=priya"`), strings.Index(dom, `data-key="user_id=bob"`); i < 0 || j < i {
		t.Fatal("top denied keys are not most denied first")
	}

	shot := filepath.Join(t.ArtifactDir(), "dashboard.png")
	browse("--screenshot=" + shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) || len(png) < 10_000 {
		t.Fatalf("screenshot %s: %d bytes, %v", shot, len(png), err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}

// table is the markup of the table with id in dom ("" if none).
func table(dom, id string) string {
	i := strings.Index(dom, `<table id="`+id+`">`)
	if i < 0 {
		return ""
	}
	j := strings.Index(dom[i:], "</table>")
	if j < 0 {
		return dom[i:]
	}
	return dom[i : i+j]
}
