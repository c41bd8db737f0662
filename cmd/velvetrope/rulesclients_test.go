package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	bad := filepath.Join(dir, "bad.csv")
	_ = os.WriteFile(bad, []byte("a,pro\nlonely\n"), 0o600)
	if code, _, stderr := runRulesCLI(append(append([]string{"clients"}, base...), "--import", bad, "shop", "customers")...); code != 1 ||
		!strings.Contains(stderr, "bad.csv:2: want VALUE[,VALUE...],PLAN, got 1 field") {
		t.Fatalf("a bad row: %d %s", code, stderr)
	}
	if code, _, stderr := runRulesCLI(append(append([]string{"clients"}, base...), "--set", "Pro", "shop", "customers", "zed")...); code != 1 ||
		!strings.Contains(stderr, `changes[0].plan: \"Pro\" holds 'P'`) && !strings.Contains(stderr, `changes[0].plan: "Pro" holds 'P'`) {
		t.Fatalf("a bad plan: %d %s", code, stderr)
	}
	if code, _, _ := runRulesCLI("clients", "--addr", srv.URL, "shop"); code != 2 {
		t.Fatalf("no table: exit %d, want 2", code)
	}
}
