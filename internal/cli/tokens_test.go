package cli

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// moduleDir is the module's root directory.
func moduleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// tokenRow is one endpoint of the docs' table and the token it needs.
type tokenRow struct {
	method, path string
	token        string // "", "admin" or "analytics"
}

// documentedTokens reads docs/http-api.md's table "Endpoints and the
// tokens they need". A cell lists endpoints as `METHOD /path`; a bare
// `/path` continues the one before it (`/v1/analytics/top-denied`,
// `/usage`: /v1/analytics/usage).
func documentedTokens(t *testing.T) []tokenRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleDir(t), "docs", "http-api.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Endpoints and the tokens they need\n")
	if !ok {
		t.Fatal(`docs/http-api.md has no section "Endpoints and the tokens they need"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	code := regexp.MustCompile("`([^`]+)`")
	var rows []tokenRow
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || !strings.Contains(cells[1], "/") {
			continue // not a row of endpoints (the header, the rule, gRPC)
		}
		tok := ""
		switch need := strings.TrimSpace(cells[2]); {
		case strings.HasPrefix(need, "none"):
		case strings.HasPrefix(need, "`admin.token`"):
			tok = "admin"
		case strings.HasPrefix(need, "`analytics.token`"):
			tok = "analytics"
		default:
			t.Fatalf("docs/http-api.md: row %q: the token column begins with neither none nor a token", line)
		}
		method, prefix := "", ""
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			ep := m[1]
			if mth, p, ok := strings.Cut(ep, " "); ok {
				method, ep = mth, p
				prefix = ep[:strings.LastIndex(ep, "/")]
			} else {
				ep = prefix + ep
			}
			rows = append(rows, tokenRow{method, ep, tok})
		}
	}
	if len(rows) < 10 {
		t.Fatalf("docs/http-api.md's table lists %d endpoints: %+v", len(rows), rows)
	}
	return rows
}

// routes is every pattern the packages serving dev's and the checker's
// HTTP listener register: the first argument of each Handle and
// HandleFunc call with a literal pattern, method dropped ("GET /{$}" is
// "/").
func routes(t *testing.T) []string {
	t.Helper()
	root := moduleDir(t)
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{"cmd/velvetrope", "internal/admin", "internal/analytics", "internal/httpapi", "internal/dashboard", "rls"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "pprof.go") {
				continue // pprof.go: debug.pprof_addr, a listener of its own
			}
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) != 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc" {
					return true
				}
				if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					p, _ := strconv.Unquote(lit.Value)
					if _, path, ok := strings.Cut(p, " "); ok {
						p = path
					}
					seen[strings.TrimSuffix(p, "{$}")] = true
				}
				return true
			})
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	return out
}

// TestDocumentedTokens: the docs' table of endpoints and tokens lists
// every endpoint the code registers, and a running dev with both tokens
// set holds each row to its word: a token endpoint refuses a request
// without it (401) and admits one with it; an open endpoint never asks
// for one.
func TestDocumentedTokens(t *testing.T) {
	rows := documentedTokens(t)
	documented := map[string]bool{}
	for _, r := range rows {
		documented[r.path] = true
	}
	for _, p := range routes(t) {
		if !documented[p] {
			t.Errorf("the code serves %s; docs/http-api.md's table of tokens does not list it", p)
		}
	}
	d := startDev(t, "", env("VELVETROPE_ADMIN_TOKEN=adm1n", "VELVETROPE_ANALYTICS_TOKEN=analyt1cs"))
	fill := strings.NewReplacer("{ticket}", "AAAAAAAAAAAAAAAAAAAAAA", "{id}", "nope", "{domain}", "api", "{name}", "nope", "{table}", "customers")
	do := func(r tokenRow, bearer string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(r.method, "http://"+d.HTTP+fill.Replace(r.path), strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, r := range rows {
		code, body := do(r, "")
		switch r.token {
		case "":
			if code == 401 || code == 403 {
				t.Errorf("%s %s is documented open; without a token: %d %s", r.method, r.path, code, body)
			}
			continue
		case "admin":
			var e struct{ Error string }
			if code != 401 || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "bearer token") {
				t.Errorf("%s %s needs admin.token; without it: %d %s, want 401", r.method, r.path, code, body)
			}
			if c, b := do(r, "analyt1cs"); c != 401 {
				t.Errorf("%s %s needs admin.token; with the analytics token: %d %s, want 401", r.method, r.path, c, b)
			}
			if c, b := do(r, "adm1n"); c == 401 || c == 403 {
				t.Errorf("%s %s with admin.token: %d %s", r.method, r.path, c, b)
			}
		case "analytics":
			if code != 401 {
				t.Errorf("%s %s needs analytics.token when set; without it: %d %s, want 401", r.method, r.path, code, body)
			}
			if c, b := do(r, "analyt1cs"); c == 401 || c == 403 {
				t.Errorf("%s %s with analytics.token: %d %s", r.method, r.path, c, b)
			}
		}
	}
}
