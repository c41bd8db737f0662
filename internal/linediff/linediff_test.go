package linediff

import (
	"strings"
	"testing"
)

// TestUnifiedAndCount pins the diff's shape — deletions before additions,
// common lines kept — and the counts, and the bound.
func TestUnifiedAndCount(t *testing.T) {
	cases := []struct {
		a, b, want     string
		added, removed int
	}{
		{"", "x\n", "+x\n", 1, 0},
		{"x\n", "", "-x\n", 0, 1},
		{"a\nb\nc\n", "a\nB\nc\n", " a\n-b\n+B\n c\n", 1, 1},
		{"a\nb\n", "a\nb\n", " a\n b\n", 0, 0},
		{"a\nb\nc\n", "c\nb\na\n", "-a\n-b\n c\n+b\n+a\n", 2, 2},
		{"a", "a\n", " a\n", 0, 0},
	}
	for i, c := range cases {
		got := strings.TrimPrefix(Unified("A", "B", c.a, c.b), "--- A\n+++ B\n")
		if got != c.want {
			t.Errorf("%d: got\n%s\nwant\n%s", i, got, c.want)
		}
		if a, r := Count(c.a, c.b); a != c.added || r != c.removed {
			t.Errorf("%d: count +%d -%d, want +%d -%d", i, a, r, c.added, c.removed)
		}
	}
	big := strings.Repeat("x\n", 3000)
	if got := Unified("A", "B", big, big+"y\n"); !strings.Contains(got, "3000 lines → 3001 lines (too long") {
		t.Errorf("a large diff: %.200s", got)
	}
	if a, r := Count(big, big+"y\n"); a != 3001 || r != 3000 {
		t.Errorf("a large count: +%d -%d", a, r)
	}
}
