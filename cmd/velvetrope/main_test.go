package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/httpapi"
)

// TestDevSmoke starts the dev process graph with fxtest and checks a
// request end to end over HTTP.
func TestDevSmoke(t *testing.T) {
	app := config.DefaultApp()
	app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
	var srv *httpapi.Server
	var gl *grpcListener
	fxApp := fxtest.New(t, devModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&srv, &gl))
	fxApp.RequireStart()
	defer fxApp.RequireStop()

	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hits":1}`
	resp, err := http.Post("http://"+srv.Addr()+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got httpjson.CheckResponse
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || got.Decision != "allow" || got.Statuses[0].Remaining != 99 {
		t.Fatalf("got %d %+v", resp.StatusCode, got)
	}
	checkEnvoyAPIs(t, srv.Addr(), gl.Addr(), 98)
	topDenied(t, srv.Addr())
	if r, err := http.Get("http://" + srv.Addr() + "/v1/rules"); err != nil || r.StatusCode != 200 {
		t.Fatalf("GET /v1/rules: %v %v", r, err)
	} else {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if !strings.Contains(string(b), `"api:user_id"`) {
			t.Fatalf("GET /v1/rules: %s", b)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		r, err := http.Get("http://" + srv.Addr() + path)
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, r, err)
		}
		r.Body.Close()
	}
}

// topDenied has mallory refused (more hits than the bucket holds) and
// waits until the analytics surfaces list her: the pipeline end to end.
func topDenied(t *testing.T, addr string) {
	t.Helper()
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"mallory"}]}],"hits":1000}`
	for range 3 {
		resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := `{"domain":"api","rule":"api:user_id","descriptor":"user_id=mallory","denied":3,"allowed":0,"deferred":0,` +
		`"shadow_denied":0,"over_soft":0,"elastic":0,"late":0}`
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Get("http://" + addr + "/v1/analytics/top-denied?window=1h&limit=10&domain=api")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode == 200 && strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("top-denied never listed mallory: %d %s", r.StatusCode, b)
		}
		time.Sleep(100 * time.Millisecond) // the pipeline flushes on its own schedule
	}
}

func TestDevWithRuleDirectoryReloads(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: shop\ndescriptors:\n  - key: cart\n    rate_limit: {unit: second, requests_per_unit: 3}\n"), 0o644)
	app := config.DefaultApp()
	app.HTTP.Addr = "127.0.0.1:0"
	app.Rules = []string{dir}
	var store *config.Store
	fxApp := fxtest.New(t, devModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&store))
	fxApp.RequireStart()
	defer fxApp.RequireStop()
	if !store.Load().HasDomain("shop") {
		t.Fatal("rules from --rules not loaded")
	}
}

func TestDevBadRulesFailToStart(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: shop\nbogus: 1\n"), 0o644)
	var stderr bytes.Buffer
	code := run([]string{"dev", "--rules", dir, "--http", "127.0.0.1:0"}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "a.yaml:2:1: rule file: unknown field \"bogus\"") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

func TestRulesValidate(t *testing.T) {
	cases := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderrLine string
	}{
		{"envoy examples", []string{"rules", "validate", "../../config/testdata/envoy"}, 0,
			"rl: ok, 8 rules (1 shadow, 2 unlimited), algorithms [envoy_fixed_window]\n", ""},
		{"built-in example", []string{"rules", "validate", "../../config/example/api.yaml"}, 0,
			"api: ok, 4 rules (1 shadow, 0 unlimited), algorithms [envoy_fixed_window sliding_log token_bucket]\n", ""},
		{"bad file", []string{"rules", "validate", "testdata/bad.yaml"}, 1, "",
			"testdata/bad.yaml:4:5: descriptor: unknown field \"rate_limt\""},
		{"missing file", []string{"rules", "validate", "testdata/nope.yaml"}, 1, "", "testdata/nope.yaml: no such file or directory\n"},
		{"alias cycle", []string{"rules", "validate", "testdata/alias-cycle.yaml"}, 1, "",
			"testdata/alias-cycle.yaml:4:18: alias *d refers to a node that contains it (anchor &d at line 2): a cycle"},
		{"usage", []string{"rules"}, 2, "", "usage: velvetrope rules validate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, errb.String())
			}
			if c.stdout != "" && !strings.Contains(out.String(), c.stdout) {
				t.Fatalf("stdout:\n%s\nwant it to contain:\n%s", out.String(), c.stdout)
			}
			if c.stderrLine != "" && !strings.Contains(errb.String(), c.stderrLine) {
				t.Fatalf("stderr:\n%s\nwant it to contain:\n%s", errb.String(), c.stderrLine)
			}
		})
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "velvetrope ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	var errb bytes.Buffer
	if code := run([]string{"frobnicate"}, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %d %q", code, errb.String())
	}
	if code := run(nil, io.Discard, io.Discard); code != 2 {
		t.Fatalf("no args: exit %d", code)
	}
}

func TestBannerShowsReachableAddress(t *testing.T) {
	for addr, want := range map[string]string{"[::]:8080": "http://localhost:8080", "0.0.0.0:9": "http://localhost:9",
		":8080": "http://localhost:8080", "127.0.0.1:8080": "http://127.0.0.1:8080"} {
		var b bytes.Buffer
		printBanner(&b, addr, ":8081", devBanner{bearer: "T", generated: true, reflection: true})
		if !strings.Contains(b.String(), "HTTP  "+want+" ") || !strings.Contains(b.String(), "curl -s -X POST "+want+"/v1/check") ||
			!strings.Contains(b.String(), "gRPC  localhost:8081 ") || !strings.Contains(b.String(), " localhost:8081 envoy.service.ratelimit.v3") {
			t.Fatalf("banner for %s:\n%s", addr, b.String())
		}
	}
	var b bytes.Buffer
	printBanner(&b, ":8080", "", devBanner{bearer: "T", generated: true, reflection: true})
	if strings.Contains(b.String(), "gRPC") || strings.Contains(b.String(), "grpcurl") {
		t.Fatalf("banner shows a disabled gRPC listener:\n%s", b.String())
	}
}

// TestDevBannerAdminToken: dev generates an admin token when none is set
// and shows it; an operator's own is kept and never echoed; the grpcurl
// hint is there only while reflection serves it.
func TestDevBannerAdminToken(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	cases := []struct {
		name       string
		token      string // admin.token after the file and the environment
		env        map[string]string
		reflection bool
		bearer     string // "": a generated token
		absent     string
	}{
		{"generated", "", nil, true, "", "yours"},
		{"from the environment", "s3cret", map[string]string{"VELVETROPE_ADMIN_TOKEN": "s3cret"}, true, "$VELVETROPE_ADMIN_TOKEN", "s3cret"},
		{"from the file", "s3cret", nil, false, "<admin.token>", "grpcurl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			app := config.DefaultApp()
			app.Admin.Token, app.GRPC.Reflection = c.token, c.reflection
			b := newDevBanner(&app, env(c.env))
			switch {
			case c.bearer == "" && (len(app.Admin.Token) != 26 || b.bearer != app.Admin.Token || !b.generated):
				t.Fatalf("no token generated: app %q, banner %+v", app.Admin.Token, b)
			case c.bearer != "" && (app.Admin.Token != c.token || b.bearer != c.bearer || b.generated):
				t.Fatalf("app %q, banner %+v; want the token %q kept, shown as %q", app.Admin.Token, b, c.token, c.bearer)
			}
			var out bytes.Buffer
			printBanner(&out, "127.0.0.1:8080", "127.0.0.1:8081", b)
			want := `curl -s -H "Authorization: Bearer ` + b.bearer + `" http://127.0.0.1:8080/v1/controls`
			if !strings.Contains(out.String(), want) || strings.Contains(out.String(), c.absent) {
				t.Fatalf("banner:\n%s\nwant it to contain %q and not %q", out.String(), want, c.absent)
			}
		})
	}
	a, b := config.DefaultApp(), config.DefaultApp()
	if newDevBanner(&a, env(nil)); newDevBanner(&b, env(nil)).bearer == a.Admin.Token {
		t.Fatal("two runs generated the same token")
	}
}

// checkEnvoyAPIs asks for user_id=priya once over gRPC and once over
// POST /json, after one earlier hit over /v1/check: the three APIs share
// one counter, so remaining goes want, want-1.
func checkEnvoyAPIs(t *testing.T, httpAddr, grpcAddr string, want uint32) {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: "priya"}}}}}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != want {
		t.Fatalf("gRPC: %v", resp)
	}
	r, err := http.Post("http://"+httpAddr+"/json", "application/json",
		strings.NewReader(`{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf(`"limitRemaining":%d`, want-1)) {
		t.Fatalf("/json: %d %s", r.StatusCode, b)
	}
}

// TestCheckCommand runs `velvetrope check` against the dev process graph.
func TestCheckCommand(t *testing.T) {
	app := config.DefaultApp()
	app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
	var gl *grpcListener
	fxApp := fxtest.New(t, devModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&gl))
	fxApp.RequireStart()
	defer fxApp.RequireStop()

	cases := []cliCase{
		{"allowed", []string{"--domain", "api", "--descriptor", "user_id=cli", "--descriptor", "nothing=x"}, 0,
			"allow\n  [0] allow limit=100/minute remaining=99 reset=600ms\n  [1] allow (no limit)\n", ""},
		{"probe", []string{"--domain", "api", "--descriptor", "user_id=cli", "--hits", "0"}, 0, "remaining=99 ", ""},
		{"denied", []string{"--domain", "api", "--descriptor", "user_id=cli", "--hits", "100"}, 2, "deny\n  [0] deny limit=100/minute remaining=99", ""},
		{"no domain", []string{"--descriptor", "user_id=cli"}, 1, "", "--domain is required"},
		{"no descriptor", []string{"--domain", "api"}, 1, "", "at least one --descriptor"},
		{"bad descriptor", []string{"--domain", "api", "--descriptor", "user_id"}, 1, "", "has no '='"},
		{"huge hits", []string{"--domain", "api", "--descriptor", "a=b", "--hits", "99999999999"}, 1, "", "--hits: at most"},
		{"nobody there", []string{"--domain", "api", "--descriptor", "a=b", "--addr", "127.0.0.1:1", "--timeout", "200ms"}, 1, "", "velvetrope check: "},
	}
	runCLI(t, "check", gl.Addr(), cases)
}

// TestTopCommand runs `velvetrope top` against the dev process graph once
// its analytics list a refused key.
func TestTopCommand(t *testing.T) {
	app := config.DefaultApp()
	app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
	var srv *httpapi.Server
	fxApp := fxtest.New(t, devModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&srv))
	fxApp.RequireStart()
	defer fxApp.RequireStop()
	topDenied(t, srv.Addr()) // mallory: 3 refusals, visible

	cases := []cliCase{
		{"table", nil, 0, "DENIED  ALLOWED  DEFERRED  SHADOW  OVER-SOFT  ELASTIC  DENY %  DOMAIN  RULE         KEY\n" +
			"     3        0         0       0          0        0   100.0  api     api:user_id  user_id=mallory\n" +
			"(last 1h, most refused — denied + deferred — first)\n", ""},
		{"json", []string{"--json", "--window", "6h", "--domain", "api", "--limit", "1"}, 0,
			`"window": "6h",` + "\n" + `  "keys": [` + "\n" + `    {` + "\n" + `      "domain": "api",`, ""},
		{"nothing denied", []string{"--domain", "shop"}, 0, "no denied keys in the last 1h\n", ""},
		{"bad window", []string{"--window", "forever"}, 1, "", `velvetrope top: invalid request: window: want a duration such as 15m, 6h or 7d, got "forever"`},
		{"bad limit", []string{"--limit", "5000"}, 1, "", "limit: want a whole number from 1 to 1000"},
		{"stray argument", []string{"api"}, 1, "", `unexpected argument "api"`},
		{"nobody there", []string{"--addr", "127.0.0.1:1", "--timeout", "200ms"}, 1, "", "velvetrope top: client: GET /v1/analytics/top-denied"},
	}
	runCLI(t, "top", srv.Addr(), cases)
}

// cliCase is one run of a subcommand: its arguments (--addr is added
// unless given), exit code, and what stdout and stderr must contain.
type cliCase struct {
	name   string
	args   []string
	code   int
	stdout string
	stderr string
}

func runCLI(t *testing.T, cmd, addr string, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := c.args
			if !strings.Contains(strings.Join(args, " "), "--addr") {
				args = append(args, "--addr", addr)
			}
			code := run(append([]string{cmd}, args...), &out, &errb)
			if code != c.code || !strings.Contains(out.String(), c.stdout) || !strings.Contains(errb.String(), c.stderr) {
				t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d, stdout containing %q, stderr containing %q",
					code, out.String(), errb.String(), c.code, c.stdout, c.stderr)
			}
		})
	}
}

// TestOverridesKeepMetricsBounded: issue 10, item 3 through the process.
// Before, 3,000 /json calls with distinct limit overrides made 12,004
// series of velvetrope_decisions_total; now an override counts under the
// rule its descriptor matches.
func TestOverridesKeepMetricsBounded(t *testing.T) {
	app := config.DefaultApp()
	app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", ""
	var srv *httpapi.Server
	fxApp := fxtest.New(t, devModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&srv))
	fxApp.RequireStart()
	defer fxApp.RequireStop()
	hc := &http.Client{Timeout: 5 * time.Second}
	for i := range 3000 {
		body := fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"u%d"}],"limit":{"requestsPerUnit":%d,"unit":"MINUTE"}}]}`, i%7, i+1)
		resp, err := hc.Post("http://"+srv.Addr()+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 && resp.StatusCode != 429 {
			t.Fatalf("call %d: %d", i, resp.StatusCode)
		}
	}
	resp, err := hc.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var series []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "velvetrope_decisions_total{") {
			series = append(series, line)
		}
	}
	// one rule, plain and override, four outcomes
	if len(series) > 8 || !strings.Contains(string(b), `velvetrope_decisions_total{decision="allow",domain="api",mode="async",override="true",rule="api:user_id"} 3000`) {
		t.Fatalf("%d series after 3,000 distinct overrides:\n%s", len(series), strings.Join(series, "\n"))
	}
}

// TestBannerExampleFollowsTheRules: the banner's hints send a request a
// loaded rule limits, so they work as printed over any rule files (they
// always named domain "api": 400 unknown domain over the user's own).
func TestBannerExampleFollowsTheRules(t *testing.T) {
	tests := []struct {
		name, rules, want string
	}{
		{"built-in", builtinRulesForTest(t), builtinExample},
		{"key-only", "domain: shop\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
			`{"domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"example"}]}]}`},
		{"nested, wildcard, unlimited first", `domain: web
descriptors:
  - key: a
    rate_limit: {unlimited: true}
  - key: b
    value: "pre*"
    descriptors:
      - key: c
        rate_limit: {unit: minute, requests_per_unit: 5}
`, `{"domain":"web","descriptors":[{"entries":[{"key":"b","value":"prex"},{"key":"c","value":"example"}]}]}`},
		{"a quote in a value", "domain: q\ndescriptors:\n  - key: k\n    value: \"it's\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`{"domain":"q","descriptors":[{"entries":[{"key":"k","value":"it's"}]}]}`},
		{"nothing limited", "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := config.ParseRules("r.yaml", []byte(tt.rules))
			if err != nil {
				t.Fatal(err)
			}
			rs, err := config.Compile([]*config.File{f})
			if err != nil {
				t.Fatal(err)
			}
			if got := exampleRequest(rs); got != tt.want {
				t.Fatalf("got %s\nwant %s", got, tt.want)
			}
			if tt.want == "" {
				return
			}
			var b bytes.Buffer
			printBanner(&b, "127.0.0.1:8080", "127.0.0.1:8081", devBanner{bearer: "T", generated: true, reflection: true, example: tt.want})
			quoted := "'" + strings.ReplaceAll(tt.want, "'", `'\''`) + "'"
			if !strings.Contains(b.String(), "grpcurl -plaintext -d "+quoted) || !strings.Contains(b.String(), "/json -d "+quoted) {
				t.Fatalf("banner:\n%s\nwant the hints to send %s", b.String(), quoted)
			}
		})
	}
}

func builtinRulesForTest(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../../config/example/api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// TestProcessesReadOnlyTheirVariables: a process reads the variables its
// --help lists and no other, so one environment file can serve every
// process: a bad VELVETROPE_GRPC_ADDR stopped the aggregator and the
// drain, which serve no gRPC, and a bad VELVETROPE_REDIS_ADDRS stopped dev.
func TestProcessesReadOnlyTheirVariables(t *testing.T) {
	for _, tt := range []struct {
		process, variable, value string
		fails                    bool
	}{
		{"aggregator", "VELVETROPE_GRPC_ADDR", "bad", false},
		{"drain", "VELVETROPE_GRPC_ADDR", "bad", false},
		{"dev", "VELVETROPE_REDIS_ADDRS", "no-port", false},
		{"dev", "VELVETROPE_KAFKA_BROKERS", "no-port", false},
		{"checker", "VELVETROPE_GRPC_ADDR", "bad", true},
		{"aggregator", "VELVETROPE_REDIS_ADDRS", "no-port", true},
		{"dev", "VELVETROPE_HTTP_ADDR", "8080", true},
	} {
		t.Run(tt.process+"/"+tt.variable, func(t *testing.T) {
			t.Setenv(tt.variable, tt.value)
			_, _, err := processConfig(tt.process, nil, io.Discard)
			switch {
			case tt.fails && (err == nil || !strings.Contains(err.Error(), tt.variable)):
				t.Fatalf("%s with %s=%s: %v, want an error naming the variable", tt.process, tt.variable, tt.value, err)
			case !tt.fails && err != nil:
				t.Fatalf("%s with %s=%s, a variable it does not read: %v", tt.process, tt.variable, tt.value, err)
			}
		})
	}
}

// TestHelpCommandAndVersionArguments: `velvetrope help CMD` is CMD's own
// help (it printed the global usage), and `version` takes no argument (it
// ignored one).
func TestHelpCommandAndVersionArguments(t *testing.T) {
	for _, tt := range []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"help", "dev"}, 0, "Usage: velvetrope dev [flags]", ""},
		{[]string{"help", "top"}, 0, "Usage: velvetrope top [flags]", ""},
		{[]string{"help", "rules"}, 0, "Usage: velvetrope rules validate", ""},
		{[]string{"help"}, 0, "velvetrope — a distributed rate limiter", ""},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"version", "extra"}, 2, "", `velvetrope version: unexpected argument "extra"`},
	} {
		var out, errs bytes.Buffer
		code := run(tt.args, &out, &errs)
		if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errs.String(), tt.errs) {
			t.Errorf("%v: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout with %q, stderr with %q", tt.args, code, out.String(), errs.String(), tt.code, tt.out, tt.errs)
		}
	}
}
