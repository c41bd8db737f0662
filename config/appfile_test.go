package config

import (
	"testing"
	"time"
)

// TestDecodeAppFileInsideLists: the decoder checks keys and types inside
// lists of mappings too, naming the item by index, and records where each
// key and item is (what validation errors point at).
func TestDecodeAppFileInsideLists(t *testing.T) {
	type item struct {
		Name  string        `yaml:"name"`
		Every time.Duration `yaml:"every"`
	}
	var v struct {
		Items []item `yaml:"items"`
		Skip  string `yaml:"-"`
	}
	doc := "items:\n  - name: a\n    every: 1s\n  - name: b\n    evry: 2s\n  - name: c\n    every: often\n  - [x]\n"
	keys, errs := decodeAppFile("f.yaml", []byte(doc), &v)
	want := []string{
		"f.yaml:5:5: items[1].evry: unknown field; known: name, every",
		`f.yaml:7:12: items[2].every: want a duration such as 250ms, 5s or 1h30m, got "often"`,
		"f.yaml:8:5: items[3]: want a mapping, got a list",
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors %v, want %d", len(errs), errs, len(want))
	}
	for i, w := range want {
		if got := errs[i].Error(); got != w {
			t.Fatalf("step %d: got %q, want %q", i, got, w)
		}
	}
	if len(v.Items) != 4 || v.Items[0].Name != "a" || v.Items[0].Every != time.Second || v.Items[2].Name != "c" || v.Items[2].Every != 0 {
		t.Fatalf("decoded %+v", v.Items)
	}
	for path, line := range map[string]int{"items": 1, "items[0]": 2, "items[0].every": 3, "items[1].name": 4, "items[2].every": 7} {
		if n, ok := keys[path]; !ok || n.Line != line {
			t.Fatalf("position of %s: got %v, want line %d", path, n, line)
		}
	}
	if _, ok := keys["items[1].evry"]; ok {
		t.Fatal("an unknown key was recorded as set")
	}
	if _, errs := decodeAppFile("f.yaml", []byte("skip: x\n"), &v); len(errs) != 1 || errs[0].Error() != "f.yaml:1:1: skip: unknown field; known: items" {
		t.Fatalf(`a field tagged "-" is no key: got %v`, errs)
	}
}
