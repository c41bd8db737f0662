// Package linediff compares two texts line by line: the diff `velvetrope
// rules push` prints and the summary (lines added and removed) the rules
// audit records.
package linediff

import (
	"fmt"
	"strings"
)

// maxCells bounds the comparison's table: two documents of a few
// thousand lines each. Beyond it the texts are reported as replaced whole.
const maxCells = 4 << 20

// op is one line of the script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	line string
}

// script returns the edit script from a to b, or nil and false when the
// texts are too long to compare line by line.
func script(la, lb []string) ([]op, bool) {
	if (len(la)+1)*(len(lb)+1) > maxCells {
		return nil, false
	}
	// lcs[i][j]: the longest common subsequence of la[i:] and lb[j:]
	lcs := make([][]int32, len(la)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(lb)+1)
	}
	for i := len(la) - 1; i >= 0; i-- {
		for j := len(lb) - 1; j >= 0; j-- {
			if la[i] == lb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []op
	i, j := 0, 0
	for i < len(la) || j < len(lb) {
		switch {
		case i < len(la) && j < len(lb) && la[i] == lb[j]:
			out = append(out, op{' ', la[i]})
			i, j = i+1, j+1
		case i < len(la) && (j == len(lb) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, op{'-', la[i]})
			i++
		default:
			out = append(out, op{'+', lb[j]})
			j++
		}
	}
	return out, true
}

// Unified is a diff of a (named nameA) and b by lines: every line, kept
// ones with a space, removed with '-', added with '+' (no hunks: rule
// documents are short). Texts too long to compare say how many lines
// each has.
func Unified(nameA, nameB, a, b string) string {
	la, lb := Lines(a), Lines(b)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	s, ok := script(la, lb)
	if !ok {
		fmt.Fprintf(&out, "@@ %d lines → %d lines (too long to compare line by line) @@\n", len(la), len(lb))
		return out.String()
	}
	for _, o := range s {
		out.WriteByte(o.kind)
		out.WriteString(o.line)
		out.WriteByte('\n')
	}
	return out.String()
}

// Count returns how many lines going from a to b adds and removes (texts
// too long to compare: all of b added, all of a removed).
func Count(a, b string) (added, removed int) {
	la, lb := Lines(a), Lines(b)
	s, ok := script(la, lb)
	if !ok {
		return len(lb), len(la)
	}
	for _, o := range s {
		switch o.kind {
		case '+':
			added++
		case '-':
			removed++
		}
	}
	return added, removed
}

// Lines splits s into its lines (a final newline ends the last one).
func Lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
