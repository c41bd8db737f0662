package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/analytics"
	"github.com/velvetrope/velvetrope/sink"
)

// TestTopShowsEveryCountAndPoolsApart (issue 20, items 1 and 8): `velvetrope
// top` prints each count in its own column — a shadow rule's would-be
// refusals as SHADOW, never as denials (its key, refused by nobody, is no
// denied key: it was listed at 100 % deny) — lists no pool among the keys,
// and lists the pools with --pools.
func TestTopShowsEveryCountAndPoolsApart(t *testing.T) {
	mem := sink.NewMemory(0)
	now := time.Now().UTC().Truncate(time.Minute)
	mem.SetClock(func() time.Time { return now })
	m := now.Add(-2 * time.Minute).Unix()
	rows := []sink.Row{
		{Minute: m, Domain: "api", Rule: "api:user_id", Descriptor: "user_id=priya", Instance: "c/1", Stream: 1, Version: 1, Allowed: 60, Denied: 465},
		{Minute: m, Domain: "api", Rule: "api:tenant/route=/export", Descriptor: "tenant=t,route=/export", Instance: "c/1", Stream: 2, Version: 2,
			Allowed: 2, ShadowDenied: 3},
		{Minute: m, Domain: "api", Rule: "api:team", Descriptor: "team=x", Instance: "c/1", Stream: 3, Version: 3, Allowed: 9, Elastic: 4, Denied: 1},
		{Minute: m, Domain: "api", Rule: "api:soft", Descriptor: "soft=s", Instance: "c/1", Stream: 4, Version: 4, Allowed: 7, OverSoft: 2, Denied: 2, Deferred: 1},
		{Minute: m, Domain: "api", Rule: "api:#pool:p", Descriptor: "#pool=p", Instance: "c/1", Stream: 5, Version: 5,
			Allowed: 4, AllowedCost: 6, Denied: 9, Pool: true},
	}
	if err := mem.Insert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	analytics.New(mem, "", nil).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	run := func(args ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		if code := runTop(append([]string{"--addr", srv.URL}, args...), &out, &errs); code != 0 {
			t.Fatalf("top %v: exit %d: %s", args, code, errs.String())
		}
		return out.String()
	}
	got := run("--window", "15m")
	want := `DENIED  ALLOWED  DEFERRED  SHADOW  OVER-SOFT  ELASTIC  DENY %  DOMAIN  RULE         KEY
   465       60         0       0          0        0    88.6  api     api:user_id  user_id=priya
     2        7         1       0          2        0    20.0  api     api:soft     soft=s
     1        9         0       0          0        4    10.0  api     api:team     team=x
(last 15m, most refused — denied + deferred — first)
`
	if got != want {
		t.Errorf("top:\n%s\nwant:\n%s", got, want)
	}
	got = run("--pools", "--window", "15m")
	want = `BORROWED  HITS  REFUSED  DOMAIN  POOL
       4     6        9  api     p
(last 15m: admissions that borrowed from each pool, their hits, and the borrowings it refused)
`
	if got != want {
		t.Errorf("top --pools:\n%s\nwant:\n%s", got, want)
	}
	if js := run("--pools", "--json"); !strings.Contains(js, `"borrowed": 4`) || !strings.Contains(js, `"pool": "p"`) {
		t.Errorf("top --pools --json: %s", js)
	}
	var out, errs bytes.Buffer
	if code := runTop([]string{"--addr", srv.URL, "--pools", "--rule", "api:team"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "--rule") {
		t.Errorf("--pools with --rule: exit %d, %q", code, errs.String())
	}
}
