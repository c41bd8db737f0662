package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/admin"
	"github.com/velvetrope/velvetrope/rulestore"
	"github.com/velvetrope/velvetrope/rulesync"
)

// rulesService is the admin API over a memory rules store, with a rule
// file of domain files.
func rulesService(t *testing.T) (*httptest.Server, *config.Store) {
	t.Helper()
	f, err := config.ParseRules("rules/files.yaml", []byte("domain: files\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	live := config.NewStore(rs)
	src := rulesync.NewSources(live, []*config.File{f})
	store, _ := rulestore.NewMemory(rulestore.Options{})
	fl := rulesync.NewFollower(store, src, rulesync.FollowerOptions{})
	mux := http.NewServeMux()
	admin.New(live, nil, "tok", 1<<20, slog.New(slog.DiscardHandler)).
		WithRulesDB(admin.RulesDB{Store: store, Sources: src, Apply: fl.SyncDomain, MaxDocumentBytes: 1 << 20}).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, live
}

func runRulesCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runRules(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestRulesPushDiffHistoryRollback: the CLI a CI job runs — push creates,
// pushes again change nothing, diff shows a change without writing it,
// push writes it, history lists both, rollback brings the first back;
// a file's domain, a bad file and a wrong token exit 1 saying why.
func TestRulesPushDiffHistoryRollback(t *testing.T) {
	srv, live := rulesService(t)
	dir := t.TempDir()
	doc := func(n string) string {
		return "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: " + n + "}\n"
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	limit := func() int64 {
		for _, r := range live.Load().Rules() {
			if r.Domain == "shop" {
				return r.Limit
			}
		}
		return -1
	}
	addr := []string{"--addr", srv.URL, "--token", "tok"}
	write("shop.yaml", doc("2"))
	steps := []struct {
		args     []string
		code     int
		out, err string
		limit    int64
	}{
		{append(append([]string{"diff"}, addr...), dir), 1, "--- /dev/null\n+++ " + filepath.Join(dir, "shop.yaml") + "\n+domain: shop", "", -1},
		{append(append([]string{"push", "--message", "from git"}, addr...), dir), 0, "shop: created at version 1\n", "", 2},
		{append(append([]string{"push"}, addr...), dir), 0, "shop: unchanged (version 1)\n", "", 2},
	}
	check := func(i int, args []string, code int, out, errs string, lim int64) {
		t.Helper()
		gotCode, gotOut, gotErr := runRulesCLI(args...)
		if gotCode != code || !strings.Contains(gotOut, out) || !strings.Contains(gotErr, errs) {
			t.Fatalf("step %d %v: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q", i, args, gotCode, gotOut, gotErr, code, out, errs)
		}
		if limit() != lim {
			t.Fatalf("step %d: shop's live limit %d, want %d", i, limit(), lim)
		}
	}
	for i, st := range steps {
		check(i, st.args, st.code, st.out, st.err, st.limit)
	}
	write("shop.yaml", doc("20"))
	check(3, append(append([]string{"diff"}, addr...), dir), 1,
		"   - key: user\n-    rate_limit: {unit: minute, requests_per_unit: 2}\n+    rate_limit: {unit: minute, requests_per_unit: 20}\n", "", 2)
	check(4, append(append([]string{"push"}, addr...), dir), 0, "shop: version 1 → 2\n", "", 20)
	check(5, append(append([]string{"history"}, addr...), "shop"), 0, "from git", "", 20)
	check(6, append(append([]string{"rollback", "--to", "1"}, addr...), "shop"), 0, "shop: version 3 is version 1's document (rollback to version 1)", "", 2)
	check(7, append(append([]string{"rollback", "--to", "9"}, addr...), "shop"), 1, "", `has no version 9`, 2)
	write("files.yaml", "domain: files\ndescriptors: []\n")
	check(8, append(append([]string{"push"}, addr...), dir), 1, "", `409 Conflict: domain "files" is defined in the rule file rules/files.yaml`, 20) // shop went on
	os.Remove(filepath.Join(dir, "files.yaml"))
	write("bad.yaml", "domain: bad\ndescriptors: 3\n")
	check(9, append(append([]string{"push"}, addr...), dir), 1, "", filepath.Join(dir, "bad.yaml")+`:2:14: descriptors: want a list`, 20)
	os.Remove(filepath.Join(dir, "bad.yaml"))
	write("shop.yaml", doc("30"))
	check(10, []string{"push", "--addr", srv.URL, "--token", "nope", dir}, 1, "", "401 Unauthorized", 20)
	check(11, []string{"rollback", "shop"}, 2, "", "usage: velvetrope rules rollback", 20)
}
