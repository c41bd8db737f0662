package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// billionLaughs builds a file whose anchors each repeat the previous one
// ten times: a few hundred bytes that expand to 10^levels nodes.
func billionLaughs(levels int) string {
	var b strings.Builder
	b.WriteString("domain: x\nl0: &l0 [a, a, a, a, a, a, a, a, a, a]\n")
	for i := 1; i <= levels; i++ {
		b.WriteString("l")
		b.WriteString(string(rune('0' + i)))
		b.WriteString(": &l")
		b.WriteString(string(rune('0' + i)))
		b.WriteString(" [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*l")
			b.WriteString(string(rune('0' + i - 1)))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func nested(depth int) string {
	var b strings.Builder
	b.WriteString("domain: x\ndescriptors:\n")
	ind := "  "
	for i := 0; i < depth; i++ {
		b.WriteString(ind + "- key: k\n")
		b.WriteString(ind + "  descriptors:\n")
		ind += "    "
	}
	b.WriteString(ind + "- key: leaf\n" + ind + "  rate_limit: {unit: second, requests_per_unit: 1}\n")
	return b.String()
}

func TestRuleFileBounds(t *testing.T) {
	cases := []struct {
		name, src string
		wantErr   string // "" = must parse
	}{
		{"the 60-byte cycle of issue 10", "domain: x\ndescriptors: &d\n  - key: k\n    descriptors: *d\n",
			"x.yaml:4:18: alias *d refers to a node that contains it (anchor &d at line 2): a cycle"},
		{"a cycle through a mapping", "domain: x\ndescriptors:\n  - &m\n    key: k\n    descriptors: [*m]\n",
			"x.yaml:5:19: alias *m refers to a node that contains it"},
		{"billion laughs", billionLaughs(6), "expands to more than 200000 YAML nodes"},
		{"deep flow nesting", "domain: x\nd: " + strings.Repeat("[", 500) + strings.Repeat("]", 500) + "\n", "nested deeper than 64 levels"},
		{"nested descriptors beyond the depth bound", nested(40), "nested deeper than 64 levels"},
		{"nested descriptors within the bound", nested(25), ""},
		{"an alias reused, not a cycle", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: second, requests_per_unit: 5}\n  - key: b\n    rate_limit: *rl\n", ""},
		{"a file above the size bound", "domain: x\n# " + strings.Repeat("x", MaxRuleFileBytes) + "\n", "rule file larger than 4194304 bytes"},
	}
	for i, c := range cases {
		f, err := ParseRules("x.yaml", []byte(c.src))
		if c.wantErr == "" {
			if err != nil {
				t.Fatalf("step %d (%s): got error %v, want none", i, c.name, err)
			}
			if _, err := Compile([]*File{f}); err != nil {
				t.Fatalf("step %d (%s): compile: %v", i, c.name, err)
			}
			continue
		}
		var list ErrorList
		if !errors.As(err, &list) {
			t.Fatalf("step %d (%s): got %v, want an ErrorList containing %q", i, c.name, err, c.wantErr)
		}
		if !strings.Contains(err.Error(), c.wantErr) {
			t.Fatalf("step %d (%s): got %q, want it to contain %q", i, c.name, err.Error(), c.wantErr)
		}
	}
}

func TestAliasedRateLimitIsShared(t *testing.T) {
	src := "domain: x\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: second, requests_per_unit: 5}\n  - key: b\n    rate_limit: *rl\n"
	f, err := ParseRules("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compile([]*File{f})
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Match("x", entries("b", "v")).Limit; got != 5 {
		t.Fatalf("limit through the alias: got %d, want 5", got)
	}
}

// TestWatcherSurvivesHostileFile: a watched directory that receives the
// cycle file keeps the last good rules and reports the file and line.
func TestWatcherSurvivesHostileFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	writeRule(t, file, "10")
	rs, err := LoadRules(dir)
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(rs)
	w, err := NewWatcher(store, time.Second, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, src := range []string{"domain: x\ndescriptors: &d\n  - key: k\n    descriptors: *d\n", billionLaughs(7)} {
		if err := os.WriteFile(filepath.Join(dir, "evil.yaml"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		reloaded, err := w.Check()
		if reloaded || err == nil || !strings.Contains(err.Error(), "evil.yaml:") {
			t.Fatalf("step %d: reloaded %v, err %v; want the file refused with its position", i, reloaded, err)
		}
		if got := store.Load().Match("api", entries("user_id", "u")).Limit; got != 10 {
			t.Fatalf("step %d: live limit %d, want the last good 10", i, got)
		}
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxRuleFileBytes+10), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRules(big); err == nil || !strings.Contains(err.Error(), "big.yaml: rule file larger than") {
		t.Fatalf("oversized file: got %v", err)
	}
}
