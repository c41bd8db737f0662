package doctest

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var (
	fuzzFunc = regexp.MustCompile(`^func (Fuzz\w*)\(\w+ \*testing\.F\)`)
	// a row of docs/testing.md's table of fuzz targets: | `pkg` | `FuzzX` | ...
	fuzzRow = regexp.MustCompile("^\\s*\\| `([^`]+)` \\| `(Fuzz\\w*)` \\|")
)

// fuzzTargets returns every fuzz target of the repository's tests as
// "pkg FuzzName" (pkg relative to the root), each with where it is defined.
func fuzzTargets(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(repoRoot, path)
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			if m := fuzzFunc.FindStringSubmatch(sc.Text()); m != nil {
				out[filepath.ToSlash(filepath.Dir(rel))+" "+m[1]] = filepath.ToSlash(rel) + ":" + strconv.Itoa(n)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTestingListsEveryFuzzTarget: docs/testing.md's table names every
// fuzz target of the code and no other, and `make fuzz-short` runs only
// targets that exist, each named where testing.md describes it.
func TestTestingListsEveryFuzzTarget(t *testing.T) {
	code := fuzzTargets(t)
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "testing.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]int{}
	for i, line := range strings.Split(string(src), "\n") {
		if m := fuzzRow.FindStringSubmatch(line); m != nil {
			listed[m[1]+" "+m[2]] = i + 1
		}
	}
	// the sentences on what make fuzz-short runs: to the end of their list item
	_, fuzzShort, _ := strings.Cut(string(src), "`make fuzz-short`")
	if i := strings.Index(fuzzShort, "\n- "); i >= 0 {
		fuzzShort = fuzzShort[:i]
	}
	for _, k := range sortedKeys(code) {
		if _, ok := listed[k]; !ok {
			t.Errorf("%s: fuzz target %s is not in docs/testing.md's table of fuzz targets", code[k], k)
		}
	}
	for _, k := range sortedKeys(listed) {
		if _, ok := code[k]; !ok {
			t.Errorf("docs/testing.md:%d: lists fuzz target %s, which no test defines", listed[k], k)
		}
	}
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := makeVar(string(mk), "FUZZ_TARGETS")
	if len(targets) == 0 {
		t.Fatal("Makefile: no FUZZ_TARGETS")
	}
	for _, tg := range targets {
		pkg, fn, _ := strings.Cut(tg, ":")
		k := strings.TrimPrefix(pkg, "./") + " " + fn
		if _, ok := code[k]; !ok {
			t.Errorf("Makefile: FUZZ_TARGETS names %s, which no test defines", tg)
		}
		if !strings.Contains(fuzzShort, "`"+fn+"`") {
			t.Errorf("docs/testing.md: the paragraph on `make fuzz-short` does not name %s, which it runs", fn)
		}
	}
}

// makeVar returns the words of a Makefile variable set with :=, following
// backslash continuations.
func makeVar(mk, name string) []string {
	lines := strings.Split(mk, "\n")
	for i, l := range lines {
		v, ok := strings.CutPrefix(l, name+" :=")
		if !ok {
			continue
		}
		for strings.HasSuffix(v, "\\") && i+1 < len(lines) {
			i++
			v = strings.TrimSuffix(v, "\\") + " " + lines[i]
		}
		return strings.Fields(v)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
