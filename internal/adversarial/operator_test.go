package adversarial

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// operatorRules: a hard rule, an elastic rule borrowing from a pool, and
// one rule per algorithm for the probes.
const operatorRules = `domain: api
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 1000}
descriptors:
  - key: user
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    algorithm: fixed_window
    throttle: {type: elastic, pool: shared, max_multiplier: 100}
    rate_limit: {unit: minute, requests_per_unit: 5}
`

const adminConfig = "admin:\n  token: adm1n\n"

// admin sends one admin request with the token.
func (p *proc) admin(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	return p.do(t, method, path, body, "Authorization", "Bearer adm1n")
}

// Item 9: operator values went through no overflow guard. A deny with
// ttl 2500000h was stored with a negative expiry (never applied, never
// listed); a limit of 2^62 on an elastic rule overflowed limit ×
// max_multiplier (every request refused with retry_never). Now each is
// refused with a 400 naming the field, and values at the bounds work.
func TestOperatorValuesOverflow(t *testing.T) {
	p := start(t, options{rules: map[string]string{"api.yaml": operatorRules}, config: adminConfig})
	maxElastic := int64(math.MaxInt64 / 100)
	steps := []struct {
		name, method, path, body string
		code                     int
		contains                 string
	}{
		{"ttl 2500000h", "POST", "/v1/controls", `{"domain":"api","descriptor":"user=mallory","action":"deny","ttl":"2500000h"}`, 400, `ttl: want 0 (until deleted) to 8760h`},
		{"ttl overflowing a duration", "POST", "/v1/controls", `{"domain":"api","descriptor":"user=mallory","action":"deny","ttl":"9999999999h"}`, 400, `ttl: want a duration`},
		{"ttl at the bound", "POST", "/v1/controls", `{"domain":"api","descriptor":"user=eve","action":"deny","ttl":"8760h"}`, 201, `"action":"deny"`},
		{"limit 2^62 on the elastic rule", "POST", "/v1/controls", `{"domain":"api","descriptor":"tenant=big","action":"limit","limit":4611686018427387904,"ttl":"1h"}`, 400, `limit: at most`},
		{"limit past the int64", "POST", "/v1/controls", `{"domain":"api","descriptor":"tenant=big","action":"limit","limit":9223372036854775808,"ttl":"1h"}`, 400, `limit`},
		{"limit at the elastic bound", "POST", "/v1/controls", fmt.Sprintf(`{"domain":"api","descriptor":"tenant=max","action":"limit","limit":%d,"ttl":"1h"}`, maxElastic), 201, `"action":"limit"`},
		{"pool capacity 0", "PUT", "/v1/pools/api/shared", `{"requests_per_unit":0}`, 400, `requests_per_unit: want at least 1`},
		{"pool capacity past the int64", "PUT", "/v1/pools/api/shared", `{"requests_per_unit":18446744073709551616}`, 400, `requests_per_unit`},
		{"pool capacity at the rule file's bound", "PUT", "/v1/pools/api/shared", fmt.Sprintf(`{"requests_per_unit":%d}`, int64(math.MaxInt64)), 200, `"override":true`},
	}
	for i, s := range steps {
		code, body := p.admin(t, s.method, s.path, s.body)
		if code != s.code || !strings.Contains(body, s.contains) {
			t.Fatalf("step %d %s: got %d %s, want %d containing %q", i, s.name, code, body, s.code, s.contains)
		}
	}
	// What was accepted applies and is listed; nothing refused is stored.
	_, list := p.admin(t, "GET", "/v1/controls", "")
	var cs struct {
		Controls []struct {
			Entries []struct{ Value string } `json:"entries"`
			Expires int64                    `json:"expires_unix_nanos"`
		} `json:"controls"`
	}
	if err := json.Unmarshal([]byte(list), &cs); err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, c := range cs.Controls {
		values = append(values, c.Entries[0].Value)
		if c.Expires <= time.Now().UnixNano() {
			t.Errorf("control %s expires at %d: in the past", c.Entries[0].Value, c.Expires)
		}
	}
	if strings.Join(values, ",") != "eve,max" && strings.Join(values, ",") != "max,eve" {
		t.Fatalf("controls listed: %v, want eve and max (and none of the refused ones)", values)
	}
	check := func(k, v string) (string, int64) {
		_, body := p.do(t, "POST", "/v1/check", fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, k, v))
		var r struct {
			Decision string
			Statuses []struct {
				Limit     int64 `json:"limit"`
				Remaining int64 `json:"remaining"`
			}
		}
		_ = json.Unmarshal([]byte(body), &r)
		if len(r.Statuses) == 0 {
			t.Fatalf("check %s=%s: %s", k, v, body)
		}
		return r.Decision, r.Statuses[0].Remaining
	}
	if d, _ := check("user", "eve"); d != "deny" {
		t.Fatalf("the deny with ttl 8760h: %s, want deny", d)
	}
	if d, rem := check("tenant", "max"); d != "allow" || rem <= 0 {
		t.Fatalf("the limit at the elastic bound: %s remaining %d, want allow with room", d, rem)
	}
	// Borrowing from a pool at the int64 capacity: the tenant's own limit
	// is 5, the pool lets it go on to 500.
	for i := range 20 {
		if d, _ := check("tenant", "acme"); d != "allow" {
			t.Fatalf("borrower's request %d under a pool of capacity 2^63-1: %s", i, d)
		}
	}
	if p.exited() {
		t.Fatal("the process exited")
	}
}

// secretTarget writes a file shaped like /etc/shadow outside any rules
// directory, each line with a token of its own.
func secretTarget(t *testing.T) (string, []string) {
	t.Helper()
	var b strings.Builder
	var tokens []string
	for i := range 6 {
		tok := fmt.Sprintf("S3CRET%dHASH", i)
		tokens = append(tokens, tok)
		fmt.Fprintf(&b, "user%d:$6$salt$%s:19000:0:99999:7:::\n", i, tok)
	}
	path := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, tokens
}

// runBin runs the binary to its end, within d; ok is false when it had to
// be killed (it blocked).
func runBin(t *testing.T, d time.Duration, args ...string) (code int, out string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return -1, string(b), false
	case errors.As(err, &ee):
		return ee.ExitCode(), string(b), true
	case err != nil:
		t.Fatal(err)
	}
	return 0, string(b), true
}

// badRulesDir is a rules directory with one good file and x.yaml made by
// mk (a link out, a FIFO).
func badRulesDir(t *testing.T, mk func(x string)) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(operatorRules), 0o644); err != nil {
		t.Fatal(err)
	}
	mk(filepath.Join(dir, "x.yaml"))
	return dir
}

// Item 10: rule files that were symlinks were followed anywhere (`rules
// validate` on a directory linking to /etc/shadow printed its lines in the
// parse errors), and a FIFO named x.yaml hung the loader. Through
// `rules validate` and dev's startup: refused at once, the file named,
// nothing of the target's content printed.
func TestRuleLoadingRefusesLinksOutAndFIFOs(t *testing.T) {
	secret, tokens := secretTarget(t)
	linkOut := badRulesDir(t, func(x string) {
		if err := os.Symlink(secret, x); err != nil {
			t.Fatal(err)
		}
	})
	fifo := badRulesDir(t, func(x string) {
		if err := syscall.Mkfifo(x, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"rules validate, a link out", []string{"rules", "validate", linkOut}, "x.yaml: a symbolic link to " + secret + ", outside the rules directory"},
		{"rules validate, a FIFO", []string{"rules", "validate", fifo}, "x.yaml: not a regular file (a named pipe)"},
		{"rules validate, the FIFO named", []string{"rules", "validate", filepath.Join(fifo, "x.yaml")}, "x.yaml: not a regular file (a named pipe)"},
		{"dev, a link out", []string{"dev", "--rules", linkOut, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, "outside the rules directory"},
		{"dev, a FIFO", []string{"dev", "--rules", fifo, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, "not a regular file (a named pipe)"},
	}
	for _, c := range cases {
		code, out, ok := runBin(t, 20*time.Second, c.args...)
		switch {
		case !ok:
			t.Errorf("%s: still running after 20 s (blocked):\n%s", c.name, out)
		case code == 0 || !strings.Contains(out, c.want):
			t.Errorf("%s: exit %d, want a failure saying %q:\n%s", c.name, code, c.want, out)
		}
		for _, tok := range tokens {
			if strings.Contains(out, tok) {
				t.Errorf("%s: the output carries the link target's content (%s):\n%s", c.name, tok, out)
				break
			}
		}
	}
}

// Item 10: the layout of a mounted Kubernetes ConfigMap keeps working
// (x.yaml -> ..data/x.yaml, ..data -> ..<timestamp>/), and the reloader
// of a running dev picks up an atomic swap of ..data.
func TestConfigMapLayoutReloads(t *testing.T) {
	dir := t.TempDir()
	write := func(version string, limit int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("domain: cm\ndescriptors:\n  - key: user\n    algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", limit)
		if err := os.WriteFile(filepath.Join(dir, version, "x.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(version string) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	v1, v2 := "..2026_12_02_01_00_00.123", "..2026_12_02_01_05_00.456"
	write(v1, 5)
	swap(v1)
	if err := os.Symlink("..data/x.yaml", filepath.Join(dir, "x.yaml")); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runBin(t, 20*time.Second, "rules", "validate", dir); code != 0 || !strings.Contains(out, "cm: ok, 1 rules") {
		t.Fatalf("rules validate of the ConfigMap layout: exit %d\n%s", code, out)
	}
	p := start(t, options{config: "rules_reload: 100ms\n", args: []string{"--rules", dir}})
	limit := func() int64 {
		_, body := p.do(t, "POST", "/v1/check", `{"domain":"cm","descriptors":[{"entries":[{"key":"user","value":"u"}]}],"hits":0}`)
		var r struct {
			Statuses []struct {
				Limit int64 `json:"limit"`
			}
		}
		_ = json.Unmarshal([]byte(body), &r)
		if len(r.Statuses) == 0 {
			return -1
		}
		return r.Statuses[0].Limit
	}
	if got := limit(); got != 5 {
		t.Fatalf("limit %d, want 5 from %s", got, v1)
	}
	write(v2, 9)
	swap(v2)
	if err := os.RemoveAll(filepath.Join(dir, v1)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the swap of ..data reloaded", func() bool { return limit() == 9 })
	if !strings.Contains(p.logs(), "rules reloaded") {
		t.Fatalf("no reload logged:\n%s", p.logs())
	}
}

// Item 12: analytics window=768614336404564651d wrapped around n × 24 h
// into range and was answered; now refused with a 400 naming the field
// and analytics.max_window.
func TestAnalyticsWindowDoesNotWrap(t *testing.T) {
	p := start(t, options{})
	for _, w := range []string{"768614336404564651d", "9223372036854775808d", "2562048h", "8d"} {
		code, body := p.do(t, "GET", "/v1/analytics/top-denied?window="+w, "")
		if code != 400 || !strings.Contains(body, "window: at most 7d here (analytics.max_window), got "+w) {
			t.Errorf("window=%s: got %d %s, want 400 naming window and analytics.max_window", w, code, body)
		}
	}
	if code, _ := p.do(t, "GET", "/v1/analytics/top-denied?window=7d", ""); code != 200 {
		t.Errorf("window=7d: %d, want 200", code)
	}
}

// Item 12: a probe (hits 0) of a fresh key reported reset_after_ms 0; it
// reports when the window or bucket would reset, as the request of one
// hit after it does, for every algorithm and mode.
func TestProbeOfFreshKeyReportsReset(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: api\ndescriptors:\n")
	var keys []string
	for _, alg := range []string{"", "fixed_window", "sliding_window", "token_bucket", "leaky_bucket", "gcra", "sliding_log"} {
		for _, mode := range []string{"async", "sync", "local"} {
			if alg == "sliding_log" && mode == "async" {
				continue
			}
			key := "k_" + alg + "_" + mode
			keys = append(keys, key)
			fmt.Fprintf(&b, "  - key: %s\n    mode: %s\n    rate_limit: {unit: minute, requests_per_unit: 6}\n", key, mode)
			if alg != "" {
				fmt.Fprintf(&b, "    algorithm: %s\n", alg)
			}
		}
	}
	p := start(t, options{rules: map[string]string{"api.yaml": b.String()}})
	reset := func(key string, hits int) int64 {
		t.Helper()
		_, body := p.do(t, "POST", "/v1/check", fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":%q,"value":"fresh"}]}],"hits":%d}`, key, hits))
		var r struct {
			Decision string
			Statuses []struct {
				Reset int64 `json:"reset_after_ms"`
			}
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || r.Decision != "allow" || len(r.Statuses) != 1 {
			t.Fatalf("%s hits %d: %s", key, hits, body)
		}
		return r.Statuses[0].Reset
	}
	for _, key := range keys {
		probe := reset(key, 0)
		hit := reset(key, 1)
		// the clock moves between the two requests: a few ms, or across a
		// window's end when the probe came just before it
		diff := max(probe-hit, hit-probe)
		if probe <= 0 || diff > 250 && probe > 500 {
			t.Errorf("%s: the fresh probe reports reset_after_ms %d, the hit after it %d", key, probe, hit)
		}
	}
}
