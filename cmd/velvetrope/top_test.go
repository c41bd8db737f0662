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

// TestTopEscapesWhatClientsSent: a descriptor's value is whatever a
// request sent, so `top` writes control characters, format characters
// and invalid UTF-8 as escapes: raw, an escape sequence recoloured the
// operator's terminal and a newline faked a row of the table. --limit
// outside 1..1000 is refused (0 quietly listed 10), and --pools takes it.
func TestTopEscapesWhatClientsSent(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"user_id=priya", "user_id=priya"},
		{"tb=esc\x1b[31mRED", `tb=esc\x1b[31mRED`},
		{"nl\nline2", `nl\x0aline2`},
		{"tab\there", `tab\x09here`},
		{"rtl\u202eevil", `rtl\u202eevil`},
		{"bad\xffbyte", `bad\xffbyte`},
		{"ünïcode ok", "ünïcode ok"},
		{"del\x7f", `del\x7f`},
		{"c1\u0085", `c1\u0085`},
	} {
		if got := printable(tt.in); got != tt.want {
			t.Errorf("printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	mem := sink.NewMemory(0)
	now := time.Now().UTC().Truncate(time.Minute)
	mem.SetClock(func() time.Time { return now })
	m := now.Add(-2 * time.Minute).Unix()
	rows := []sink.Row{
		{Minute: m, Domain: "api", Rule: "api:tb", Descriptor: "tb=x\x1b[2J\nFAKE  ROW", Instance: "c/1", Stream: 1, Version: 1, Denied: 3},
		{Minute: m, Domain: "api", Rule: "api:#pool:a\nb", Descriptor: "#pool=a\nb", Instance: "c/1", Stream: 2, Version: 2, Allowed: 1, Pool: true},
		{Minute: m, Domain: "api", Rule: "api:#pool:c", Descriptor: "#pool=c", Instance: "c/1", Stream: 3, Version: 3, Allowed: 1, Pool: true},
	}
	if err := mem.Insert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	analytics.New(mem, "", nil).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	run := func(args ...string) (string, string, int) {
		var out, errs bytes.Buffer
		code := runTop(append([]string{"--addr", srv.URL}, args...), &out, &errs)
		return out.String(), errs.String(), code
	}
	out, errs, code := run("--window", "15m")
	if code != 0 || strings.ContainsAny(out, "\x1b") || strings.Count(out, "\n") != 3 || !strings.Contains(out, `tb=x\x1b[2J\x0aFAKE  ROW`) {
		t.Errorf("top: exit %d %s\n%q", code, errs, out)
	}
	out, _, code = run("--pools", "--window", "15m")
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, `a\x0ab`) {
		t.Errorf("top --pools:\n%q", out)
	}
	if out, _, _ = run("--pools", "--window", "15m", "--limit", "1"); strings.Count(out, "\n") != 3 {
		t.Errorf("top --pools --limit 1:\n%s", out)
	}
	for _, l := range []string{"0", "1001", "-1"} {
		if _, errs, code := run("--limit", l); code != 1 || !strings.Contains(errs, "--limit: want a whole number from 1 to 1000, got "+l) {
			t.Errorf("--limit %s: exit %d %q", l, code, errs)
		}
	}
}
