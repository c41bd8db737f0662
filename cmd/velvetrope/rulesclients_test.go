package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
)

// TestRulesClientsCLI: a billing export imported as CSV in several
// batches (quoted values with commas, a removal), one client set, read
// back with each rule's limit, and the table's summary; bad rows name
// their line.
func TestRulesClientsCLI(t *testing.T) {
	srv, _ := rulesService(t)
	dir := t.TempDir()
	doc := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(doc, []byte("domain: shop\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    plans: {table: customers, limits: {pro: 50}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--addr", srv.URL, "--token", "tok"}
	if code, _, stderr := runRulesCLI(append(append([]string{"push"}, base...), doc)...); code != 0 {
		t.Fatal(stderr)
	}
	var csv strings.Builder
	for i := range 25000 { // three batches
		fmt.Fprintf(&csv, "client-%d,pro\n", i)
	}
	csv.WriteString("\"a,b\",pro\nclient-7,\n\"x\"\"y\",gold\n")
	path := filepath.Join(dir, "billing.csv")
	if err := os.WriteFile(path, []byte(csv.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runRulesCLI(append(append([]string{"clients"}, base...), "--import", path, "shop", "customers")...)
	if code != 0 || !strings.Contains(out, "shop/customers: 25003 changes written (the table's changes now number 25003)") ||
		!strings.Contains(out, "names the plans gold") {
		t.Fatalf("import: %d\n%s\n%s", code, out, stderr)
	}
	if code, _, stderr := runRulesCLI(append(append([]string{"clients"}, base...), "--set", "pro", "shop", "customers", "zed")...); code != 0 {
		t.Fatal(stderr)
	}
	cases := []struct{ value, want string }{
		{"a,b", "a,b: plan pro\n  shop:api_key: 50\n"},
		{"client-7", "client-7: plan (none: the rules' own limits)\n  shop:api_key: 5\n"},
		{`x"y`, "x\"y: plan gold\n  shop:api_key: 5\n"},
		{"zed", "zed: plan pro\n  shop:api_key: 50\n"},
	}
	for _, c := range cases {
		code, out, stderr := runRulesCLI(append(append([]string{"clients"}, base...), "--get", "shop", "customers", c.value)...)
		if code != 0 || out != c.want {
			t.Fatalf("get %q: %d %q %s, want %q", c.value, code, out, stderr, c.want)
		}
	}
	code, out, _ = runRulesCLI(append(append([]string{"clients"}, base...), "shop", "customers")...)
	if code != 0 || out != "shop/customers: 25002 clients, 25004 changes written, plans: gold, pro\n  shop:api_key (client: api_key): 5 per minute without a plan, pro 50\n" {
		t.Fatalf("summary: %d %q", code, out)
	}
	for _, c := range []struct{ csv, want string }{
		{"a,pro\nlonely\n", "bad.csv: record on line 2: wrong number of fields"},
		{"lonely\n", "bad.csv:1: want VALUE[,VALUE...],PLAN, got 1 field"},
		{"a,pro\nb,pro,\n", "bad.csv: record on line 2: wrong number of fields"}, // a stray comma: not a removal of client [b, pro]
		{"a,b,pro\n", "bad.csv:1: 2 values; the rules reading this table name a client by 1 (api_key, rule shop:api_key)"},
		{"a,pro\nb\xff,pro\n", "bad.csv:2: not UTF-8 text"},
	} {
		bad := filepath.Join(dir, "bad.csv")
		_ = os.WriteFile(bad, []byte(c.csv), 0o600)
		if code, _, stderr := runRulesCLI(append(append([]string{"clients"}, base...), "--import", bad, "shop", "customers")...); code != 1 ||
			!strings.Contains(stderr, c.want) {
			t.Fatalf("%q: %d %s, want %s", c.csv, code, stderr, c.want)
		}
	}
	bom := filepath.Join(dir, "bom.csv")
	_ = os.WriteFile(bom, []byte("\xEF\xBB\xBFbom1,pro\r\n\r\n"), 0o600)
	if code, _, stderr := runRulesCLI(append(append([]string{"clients"}, base...), "--import", bom, "shop", "customers")...); code != 0 {
		t.Fatal(stderr)
	}
	if _, out, _ := runRulesCLI(append(append([]string{"clients"}, base...), "--get", "shop", "customers", "bom1")...); !strings.HasPrefix(out, "bom1: plan pro") {
		t.Fatalf("a BOM kept in the first client: %q", out)
	}
	empty := filepath.Join(dir, "empty.csv")
	_ = os.WriteFile(empty, nil, 0o600)
	if code, out, _ := runRulesCLI(append(append([]string{"clients"}, base...), "--import", empty, "shop", "customers")...); code != 0 || !strings.Contains(out, "no rows: nothing written") {
		t.Fatalf("an empty file: %d %s", code, out)
	}
	if code, _, stderr := runRulesCLI(append(append([]string{"clients"}, base...), "--set", "Pro", "shop", "customers", "zed")...); code != 1 ||
		!strings.Contains(stderr, `changes[0].plan: \"Pro\" holds 'P'`) && !strings.Contains(stderr, `changes[0].plan: "Pro" holds 'P'`) {
		t.Fatalf("a bad plan: %d %s", code, stderr)
	}
	if code, _, _ := runRulesCLI("clients", "--addr", srv.URL, "shop"); code != 2 {
		t.Fatalf("no table: exit %d, want 2", code)
	}
}

// TestRulesStagePromoteCLI: push --stage shadow stages a version the
// live rules ignore, history marks it, promote makes it live.
func TestRulesStagePromoteCLI(t *testing.T) {
	srv, live := rulesService(t)
	dir := t.TempDir()
	doc := func(n string) string {
		return "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: " + n + "}\n"
	}
	path := filepath.Join(dir, "shop.yaml")
	base := []string{"--addr", srv.URL, "--token", "tok"}
	limit := func(domain string) int64 {
		if r := live.Load().Match(domain, []config.Entry{{Key: "user", Value: "u"}}); r != nil {
			return r.Limit
		}
		return -1
	}
	_ = os.WriteFile(path, []byte(doc("2")), 0o600)
	if code, _, stderr := runRulesCLI(append(append([]string{"push"}, base...), path)...); code != 0 {
		t.Fatal(stderr)
	}
	_ = os.WriteFile(path, []byte(doc("9")), 0o600)
	code, out, stderr := runRulesCLI(append(append([]string{"push"}, base...), "--stage", "shadow", path)...)
	if code != 0 || !strings.Contains(out, "shop: version 2 is staged: it enforces nothing (version 1 stays live) until `velvetrope rules promote shop`") {
		t.Fatalf("stage: %d %s %s", code, out, stderr)
	}
	if limit("shop") != 2 || limit("shop#staged") != 9 {
		t.Fatalf("live %d staged %d", limit("shop"), limit("shop#staged"))
	}
	if code, out, _ := runRulesCLI(append(append([]string{"push"}, base...), "--stage", "shadow", path)...); code != 0 || !strings.Contains(out, "unchanged (version 2)") {
		t.Fatalf("stage again: %s", out)
	}
	if _, out, _ := runRulesCLI(append(append([]string{"history"}, base...), "shop")...); !strings.Contains(out, "[staged over version 1]") {
		t.Fatalf("history: %s", out)
	}
	code, out, stderr = runRulesCLI(append(append([]string{"promote"}, base...), "shop")...)
	if code != 0 || out != "shop: version 3 is live (promote version 2)\n" || limit("shop") != 9 || limit("shop#staged") != -1 {
		t.Fatalf("promote: %d %q %s; live %d staged %d", code, out, stderr, limit("shop"), limit("shop#staged"))
	}
	if code, _, stderr := runRulesCLI(append(append([]string{"promote"}, base...), "shop")...); code != 1 || !strings.Contains(stderr, "has no staged version") {
		t.Fatalf("promote again: %d %s", code, stderr)
	}
}

// TestRulesCommandsNeverEchoTheToken: --help and a flag error print the
// flags' defaults; the admin token from the environment is not one.
func TestRulesCommandsNeverEchoTheToken(t *testing.T) {
	t.Setenv("VELVETROPE_ADMIN_TOKEN", "s3cret-token-xyz")
	for sub := range rulesStoreCommands {
		for _, args := range [][]string{{sub, "--help"}, {sub, "--bogus"}} {
			_, out, errOut := runRulesCLI(args...)
			if strings.Contains(out+errOut, "s3cret-token-xyz") {
				t.Errorf("velvetrope rules %s printed the admin token", strings.Join(args, " "))
			}
		}
	}
}
