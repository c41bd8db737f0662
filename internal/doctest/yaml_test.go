package doctest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/velvetrope/velvetrope/config"
)

// yamlKind is what a YAML block of the docs is, by its top level.
type yamlKind int

const (
	yamlRules    yamlKind = iota // a rule file: a mapping with domain, pools or descriptors
	yamlConfig                   // any other mapping: velvetrope's configuration file (--config)
	yamlFragment                 // a sequence (a bare descriptor list) or a scalar: refused
)

// ruleFileKeys are the top-level keys that make a mapping a rule file,
// the same test the rule loader's "not a rule file" error makes.
var ruleFileKeys = []string{"domain", "pools", "descriptors"}

// classify says what a block holds; err is YAML that does not parse.
func classify(src string) (yamlKind, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		return yamlRules, err // the loaders report it with its position
	}
	if len(doc.Content) == 0 {
		return yamlFragment, nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return yamlFragment, nil
	}
	for i := 0; i < len(top.Content); i += 2 {
		if slices.Contains(ruleFileKeys, top.Content[i].Value) {
			return yamlRules, nil
		}
	}
	return yamlConfig, nil
}

// loadYAMLBlock loads a block as the product loads the file it stands
// for: a rule file with config.LoadRules (what `velvetrope rules validate`
// runs), a configuration file with config.LoadApp and no environment.
// The block is written to a file with as many blank lines before it as
// precede it in the markdown, so every position an error names is the
// markdown's own line and column; the file's name is then replaced by the
// markdown's.
func loadYAMLBlock(t *testing.T, b block, kind yamlKind) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), strings.NewReplacer("/", "_", ".", "_").Replace(b.file)+".yaml")
	padded := strings.Repeat("\n", b.line) + b.text()
	if err := os.WriteFile(path, []byte(padded), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	switch kind {
	case yamlRules:
		_, err = config.LoadRules(path)
	case yamlConfig:
		_, err = config.LoadApp(path, func(string) (string, bool) { return "", false })
	default:
		err = errors.New("a YAML fragment (a bare list or value): make it a whole rule file (domain: and descriptors:) or configuration file")
	}
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), path, b.file)
	if !strings.Contains(msg, b.file) { // an error with no position (a configuration field): the block's
		msg = b.where() + ": " + msg
	}
	return errors.New(msg)
}

// TestDocYAMLBlocks validates every ```yaml block of README.md and
// docs/*.md: a rule file as `velvetrope rules validate` does, a
// configuration file as --config loads it. A block marked
// `<!-- doctest: invalid[: TEXT] -->` must fail (with TEXT in the error);
// one marked `<!-- doctest: skip: REASON -->` (an Envoy or Docker file)
// must still be YAML.
func TestDocYAMLBlocks(t *testing.T) {
	counts := map[string]int{}
	for _, file := range docFiles(t) {
		for _, b := range readBlocks(t, file) {
			if b.lang != "yaml" && b.lang != "yml" {
				continue
			}
			t.Run(b.where(), func(t *testing.T) {
				if b.marker.kind == markSkip {
					var v any
					if err := yaml.Unmarshal([]byte(b.text()), &v); err != nil {
						t.Errorf("%s: skipped (%s) but not YAML: %v", b.where(), b.marker.arg, err)
					}
					counts["skipped"]++
					return
				}
				kind, _ := classify(b.text())
				err := loadYAMLBlock(t, b, kind)
				name := map[yamlKind]string{yamlRules: "rule file", yamlConfig: "configuration file", yamlFragment: "fragment"}[kind]
				counts[name]++
				switch {
				case b.marker.kind == markInvalid && err == nil:
					t.Errorf("%s: marked invalid, but the %s loads", b.where(), name)
				case b.marker.kind == markInvalid && !strings.Contains(err.Error(), b.marker.arg):
					t.Errorf("%s: marked invalid: %q, but the %s fails otherwise:\n%v", b.where(), b.marker.arg, name, err)
				case b.marker.kind == markInvalid:
					counts["invalid as marked"]++
				case err != nil:
					t.Errorf("%s: the %s does not load (fix the example, or mark it <!-- doctest: invalid -->):\n%v", b.where(), name, err)
				}
			})
		}
	}
	t.Logf("YAML blocks: %v", counts)
	// The suite would pass vacuously if the extraction found nothing.
	if counts["rule file"] < 4 || counts["configuration file"] < 1 || counts["invalid as marked"] < 1 {
		t.Errorf("found %v: want at least 4 rule files, 1 configuration file and 1 block invalid as marked", counts)
	}
}

func TestClassifyAndLoadYAMLBlock(t *testing.T) {
	tests := []struct {
		src  string
		kind yamlKind
		err  string // "" loads
	}{
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", yamlRules, ""},
		{"  domain: a\n  descriptors: []\n", yamlRules, ""},
		// the position is the markdown's: the block starts after line 10
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n", yamlRules, `x.md:14:5: descriptor: unknown field "rate_limt"`},
		{"pools: []\n", yamlRules, "x.md"},
		{"http: {addr: \":9090\"}\nredis: {addrs: [\"127.0.0.1:6379\"]}\n", yamlConfig, ""},
		{"http: {adr: \":9090\"}\n", yamlConfig, "x.md:11:8: http.adr: unknown field; known: addr"},
		{"http: {addr: \"9090\"}\n", yamlConfig, `x.md:11:8: http.addr: want host:port, got "9090"`},
		{"- key: k\n  rate_limit: {unit: second, requests_per_unit: 1}\n", yamlFragment, "a YAML fragment"},
		{"domain: [\n", yamlRules, "x.md:"},
	}
	for i, tt := range tests {
		kind, _ := classify(tt.src)
		if kind != tt.kind {
			t.Errorf("%d: classify: got %d, want %d", i, kind, tt.kind)
		}
		b := block{file: "x.md", line: 10, lang: "yaml", lines: strings.Split(strings.TrimSuffix(tt.src, "\n"), "\n")}
		err := loadYAMLBlock(t, b, kind)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%d: got %v, want it to load", i, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%d: got %v, want an error containing %q", i, err, tt.err)
		case err != nil && strings.Contains(err.Error(), "x_md.yaml"):
			t.Errorf("%d: the error names the temporary file: %v", i, err)
		}
	}
}
