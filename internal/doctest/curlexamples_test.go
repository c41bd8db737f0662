package doctest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// The placeholders of the curl examples and what the test puts for them.
const (
	docAddr       = "localhost:8080"         // velvetrope dev's documented HTTP address → the test's
	exampleTicket = "q3Yw0x9mT1KbQf2c8hZ4eA" // the docs' ticket → the last ticket an example was answered
	tokenVar      = "VELVETROPE_ADMIN_TOKEN" // → the admin token the test starts dev with
	adminToken    = "doctest-admin-token"
)

// isShellBlock reports whether a block is read as shell: any block but
// one of data or code, which holds no command a reader runs (an unnamed
// block may be a transcript).
func isShellBlock(lang string) bool {
	return !slices.Contains([]string{"yaml", "yml", "json", "go", "sql", "proto"}, lang)
}

// curlExample is one curl command of the docs and its documented answer.
type curlExample struct {
	where string // FILE:LINE
	cmd   command
}

// curlExamples returns every curl command of file's shell blocks and the
// skipped blocks' reasons; a curl the test could not run faithfully (a
// pipe, an unknown variable, curl inside another command) is an error.
func curlExamples(t *testing.T, file string) (examples []curlExample, skipped []string) {
	t.Helper()
	lookup := func(name string) (string, bool) {
		if name == tokenVar {
			return adminToken, true
		}
		return "", false
	}
	for _, b := range readBlocks(t, file) {
		if !isShellBlock(b.lang) {
			continue
		}
		for _, c := range parseCommands(b, lookup) {
			curl, elsewhere := c.isCurl()
			where := fmt.Sprintf("%s:%d", file, c.line)
			switch {
			case !curl && !elsewhere:
				continue
			case b.marker.kind == markSkip:
				skipped = append(skipped, where+" ("+b.marker.arg+")")
				continue
			case b.marker.kind == markInvalid:
				t.Errorf("%s: a shell block marked invalid: only YAML blocks can be (mark it skip: REASON)", b.where())
			case elsewhere:
				t.Errorf("%s: curl inside another command: the test runs curl commands alone (or mark the block <!-- doctest: skip: REASON -->)", where)
			case len(c.problems) > 0:
				t.Errorf("%s: the test cannot run this curl as a shell would: %s (or mark the block <!-- doctest: skip: REASON -->)", where, strings.Join(c.problems, "; "))
			default:
				examples = append(examples, curlExample{where, c})
			}
		}
	}
	return examples, skipped
}

// readerDir makes the working directory a reader of the docs runs the
// examples in: the built-in rules as config/example/api.yaml (the admin
// examples post it, as a reader in the repository does), and README.md's shop
// rule file as shop.yaml with its defer target turned into target. It
// returns the directory and dev's --rules.
func readerDir(t *testing.T, target string) (dir, rules string) {
	t.Helper()
	dir = t.TempDir()
	api, err := os.ReadFile(filepath.Join(repoRoot, "config", "example", "api.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var shop string
	for _, b := range readBlocks(t, "README.md") {
		var top struct {
			Domain string `yaml:"domain"`
		}
		if (b.lang == "yaml" || b.lang == "yml") && yaml.Unmarshal([]byte(b.text()), &top) == nil && top.Domain == "shop" {
			if shop != "" {
				t.Fatalf("%s: a second shop rule file in README.md: the examples would not know which one they use", b.where())
			}
			shop = b.text()
		}
	}
	targets := regexp.MustCompile(`target:\s*"?(https?://[^",}\s]+)`).FindAllStringSubmatch(shop, -1)
	if shop == "" || len(targets) == 0 {
		t.Fatal("README.md has no shop rule file with a defer target: the deferred examples have no rule to run against")
	}
	for _, m := range targets {
		shop = strings.ReplaceAll(shop, m[1], target)
	}
	for name, body := range map[string]string{"config/example/api.yaml": string(api), "shop.yaml": shop} {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, "config/example/api.yaml,shop.yaml"
}

// TestDocCurlExamples runs every curl example of README.md and docs/*.md
// against a real `velvetrope dev` (one per file, fresh), in document order,
// as a reader would: the built-in rules plus README.md's shop rules
// (readerDir), localhost:8080 turned into the process's address,
// $VELVETROPE_ADMIN_TOKEN set, the example ticket turned into the last
// ticket an example was answered. Each answer must be 2xx JSON of the
// shape the `# {...}` comment after the command documents (shapeCheck).
// A curl it cannot run fails the test unless its block is marked
// `<!-- doctest: skip: REASON -->`.
func TestDocCurlExamples(t *testing.T) {
	total := map[string]int{}
	for _, file := range docFiles(t) {
		examples, skipped := curlExamples(t, file)
		for _, s := range skipped {
			t.Logf("skipped %s", s)
		}
		if len(examples) == 0 {
			continue
		}
		t.Run(file, func(t *testing.T) {
			target := &testsvc.Target{}
			ts := httptest.NewServer(target)
			defer ts.Close()
			dir, rules := readerDir(t, ts.URL)
			d := startDev(t, dir, []string{tokenVar + "=" + adminToken, "VELVETROPE_STATE_DIR=" + filepath.Join(dir, "state")}, "--rules", rules)
			run := &curlRun{dir: dir, addr: d.addr}
			for _, ex := range examples {
				t.Run(ex.where, func(t *testing.T) {
					if err := run.example(t, ex); err != nil {
						t.Errorf("%s: %v", ex.where, err)
					} else {
						total[file]++
					}
				})
			}
			if t.Failed() {
				t.Logf("velvetrope dev's log:\n%s", d.logs())
			}
		})
	}
	t.Logf("curl examples that ran as documented: %v", total)
	// The suite would pass vacuously if the extraction found nothing.
	if total["README.md"] < 5 || total["docs/http-api.md"] < 6 {
		t.Errorf("ran %v: want at least 5 of README.md and 6 of docs/http-api.md", total)
	}
}

// curlRun is the state the examples of one file share, in order.
type curlRun struct {
	dir, addr string
	ticket    string // the last ticket an answer carried
}

// example runs one curl example until its answer matches the documented
// shape, or fails: asked again only while the answer is on its way to the
// documented one (a decision still allow where deny or defer is
// documented: the key's budget is being spent; a ticket still queued),
// within 30 s.
func (r *curlRun) example(t *testing.T, ex curlExample) error {
	want, err := parseShape(ex.cmd.comment)
	if err != nil {
		return fmt.Errorf("document the answer in a comment after the command, as `# {...}` JSON (... for what varies): %w", err)
	}
	req, err := parseCurl(ex.cmd.words, func(name string) ([]byte, error) {
		if !filepath.IsLocal(name) {
			return nil, fmt.Errorf("%s: not a file of the reader's directory", name)
		}
		return os.ReadFile(filepath.Join(r.dir, name))
	})
	if err != nil {
		return err
	}
	u, err := url.Parse(req.url)
	if err != nil {
		return fmt.Errorf("curl URL %q: %v", req.url, err)
	}
	if u.Scheme != "http" || u.Host != docAddr {
		return fmt.Errorf("curl URL %q: not velvetrope dev's %s, which the test runs (mark the block <!-- doctest: skip: REASON -->)", req.url, docAddr)
	}
	u.Host = r.addr
	raw := u.String()
	if strings.Contains(raw, exampleTicket) || bytes.Contains(req.body, []byte(exampleTicket)) {
		if r.ticket == "" {
			return fmt.Errorf("uses the example ticket %s, but no example before it was answered a ticket", exampleTicket)
		}
		raw = strings.ReplaceAll(raw, exampleTicket, r.ticket)
		req.body = bytes.ReplaceAll(req.body, []byte(exampleTicket), []byte(r.ticket))
	}
	path := strings.TrimPrefix(raw, "http://"+r.addr)
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 1; ; attempt++ {
		status, body, err := send(req.method, raw, req.header, req.body)
		if err != nil {
			return err
		}
		if status < 200 || status > 299 {
			return fmt.Errorf("%s %s: status %d, want 2xx: %s", req.method, path, status, clipText(string(body), 300))
		}
		var got any
		if err := json.Unmarshal(body, &got); err != nil {
			return fmt.Errorf("%s %s: the answer is not JSON (%v): %s", req.method, path, err, clipText(string(body), 300))
		}
		diffs := want.check(got, "")
		if len(diffs) == 0 {
			if m, ok := got.(map[string]any); ok {
				if tk, ok := m["ticket"].(string); ok {
					r.ticket = tk
				}
			}
			t.Logf("%s %s: %d, as documented (attempt %d): %s", req.method, path, status, attempt, clipText(string(body), 300))
			return nil
		}
		why, pending := want.pending(got)
		if !pending || time.Now().After(deadline) {
			if pending {
				why = " (still " + why + " after 30 s)"
			} else {
				why = ""
			}
			return fmt.Errorf("%s %s: the answer differs from the documented one%s:\n  %s\nanswer: %s", req.method, path, why,
				strings.Join(diffs, "\n  "), body)
		}
		if strings.HasPrefix(why, "state") {
			time.Sleep(20 * time.Millisecond) // the real drain delivers in its own time; a key's budget is spent by asking
		}
	}
}

// send makes one HTTP request and returns its status and body.
func send(method, rawURL string, header http.Header, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}
