package doctest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository's top directory, from this package's.
const repoRoot = "../.."

// block is one fenced code block of a markdown file.
type block struct {
	file   string // path relative to the repository, e.g. docs/rules.md
	line   int    // 1-based line of the opening fence
	lang   string // first word of the info string ("yaml", "sh", "")
	lines  []string
	marker marker
}

// where names the block in failures: FILE:LINE of its opening fence.
func (b block) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// text is the block's content, each line as written (indentation kept).
func (b block) text() string {
	if len(b.lines) == 0 {
		return ""
	}
	return strings.Join(b.lines, "\n") + "\n"
}

// markerKind says what a block's doctest marker asks for.
type markerKind int

const (
	markNone    markerKind = iota
	markInvalid            // a rule or config block that must fail to load
	markSkip               // a block the tests do not run (its reason says why)
)

// marker is a `<!-- doctest: ... -->` comment on the last non-blank line
// before a fence: `invalid`, `invalid: TEXT` (the error must contain
// TEXT) or `skip: REASON`.
type marker struct {
	kind markerKind
	arg  string // the expected error text (invalid) or the reason (skip)
}

const markerPrefix = "<!-- doctest:"

// parseMarker reads a marker line; ok is false when line is no marker.
func parseMarker(line string) (m marker, ok bool, err error) {
	s := strings.TrimSpace(line)
	rest, found := strings.CutPrefix(s, markerPrefix)
	if !found {
		return marker{}, false, nil
	}
	rest, found = strings.CutSuffix(rest, "-->")
	if !found {
		return marker{}, true, fmt.Errorf("doctest marker %q: want it on one line, ending in -->", s)
	}
	word, arg, _ := strings.Cut(strings.TrimSpace(rest), ":")
	word, arg = strings.TrimSpace(word), strings.TrimSpace(arg)
	switch word {
	case "invalid":
		return marker{markInvalid, arg}, true, nil
	case "skip":
		if arg == "" {
			return marker{}, true, fmt.Errorf("doctest marker %q: skip needs a reason (skip: REASON)", s)
		}
		return marker{markSkip, arg}, true, nil
	}
	return marker{}, true, fmt.Errorf("doctest marker %q: unknown kind %q (want invalid, invalid: TEXT or skip: REASON)", s, word)
}

// parseBlocks returns the fenced blocks of a markdown file (``` or ~~~
// fences, indented or not), each with the marker before it. A marker that
// is not followed by a fence, an unknown marker and an unclosed fence are
// errors naming the line.
func parseBlocks(file string, src string) ([]block, error) {
	var out []block
	var cur *block
	var fence string // the open fence's characters, "" outside a block
	var pending *marker
	pendingLine := 0
	for i, line := range strings.Split(src, "\n") {
		n := i + 1
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				out = append(out, *cur)
				cur, fence = nil, ""
				continue
			}
			cur.lines = append(cur.lines, line)
			continue
		}
		if f := fenceOf(trimmed); f != "" {
			info := strings.TrimSpace(strings.TrimLeft(trimmed, f[:1]))
			lang, _, _ := strings.Cut(info, " ")
			cur = &block{file: file, line: n, lang: lang}
			if pending != nil {
				cur.marker, pending = *pending, nil
			}
			fence = f
			continue
		}
		m, ok, err := parseMarker(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		switch {
		case ok:
			pending, pendingLine = &m, n
		case trimmed != "" && pending != nil:
			return nil, fmt.Errorf("%s:%d: doctest marker not followed by a code block", file, pendingLine)
		}
	}
	if fence != "" {
		return nil, fmt.Errorf("%s:%d: code block never closed", file, cur.line)
	}
	if pending != nil {
		return nil, fmt.Errorf("%s:%d: doctest marker not followed by a code block", file, pendingLine)
	}
	return out, nil
}

// fenceOf returns the fence a trimmed line opens (``` or ~~~ and any
// longer run), or "".
func fenceOf(trimmed string) string {
	for _, c := range []string{"`", "~"} {
		if strings.HasPrefix(trimmed, c+c+c) {
			return c + c + c + strings.Repeat(c, len(trimmed)-len(strings.TrimLeft(trimmed, c))-3)
		}
	}
	return ""
}

// docFiles are the markdown files whose examples the tests keep true:
// README.md and every docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(f, repoRoot+string(filepath.Separator))))
	}
	slices.Sort(out[1:])
	return out
}

// readBlocks parses the blocks of a file of the repository.
func readBlocks(t *testing.T, file string) []block {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := parseBlocks(file, string(src))
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func TestParseBlocks(t *testing.T) {
	tests := []struct {
		name, src string
		want      []block // file "x.md"; lines compared, marker compared
		err       string
	}{
		{name: "none", src: "# title\n\ntext\n"},
		{name: "one yaml", src: "a\n```yaml\ndomain: x\n```\n",
			want: []block{{line: 2, lang: "yaml", lines: []string{"domain: x"}}}},
		{name: "info string and tilde", src: "~~~sh title\ncurl x\n~~~\n",
			want: []block{{line: 1, lang: "sh", lines: []string{"curl x"}}}},
		{name: "indented fence keeps the content's indentation", src: "- item\n  ```yaml\n  domain: x\n  ```\n",
			want: []block{{line: 2, lang: "yaml", lines: []string{"  domain: x"}}}},
		{name: "a longer fence holds a shorter one", src: "````md\n```yaml\n```\n````\n",
			want: []block{{line: 1, lang: "md", lines: []string{"```yaml", "```"}}}},
		{name: "invalid marker", src: "<!-- doctest: invalid: shards need -->\n```yaml\nd\n```\n",
			want: []block{{line: 2, lang: "yaml", lines: []string{"d"}, marker: marker{markInvalid, "shards need"}}}},
		{name: "marker, blank line, block", src: "<!-- doctest: skip: Envoy's config -->\n\n```yaml\nd\n```\n",
			want: []block{{line: 3, lang: "yaml", lines: []string{"d"}, marker: marker{markSkip, "Envoy's config"}}}},
		{name: "marker applies to the next block only", src: "<!-- doctest: invalid -->\n```yaml\na\n```\n```yaml\nb\n```\n",
			want: []block{{line: 2, lang: "yaml", lines: []string{"a"}, marker: marker{markInvalid, ""}},
				{line: 5, lang: "yaml", lines: []string{"b"}}}},
		{name: "skip without reason", src: "<!-- doctest: skip -->\n```sh\n```\n", err: "x.md:1: doctest marker"},
		{name: "unknown marker", src: "<!-- doctest: invalidd -->\n```sh\n```\n", err: `unknown kind "invalidd"`},
		{name: "marker before text", src: "<!-- doctest: invalid -->\ntext\n```sh\n```\n", err: "x.md:1: doctest marker not followed by a code block"},
		{name: "marker at the end", src: "<!-- doctest: invalid -->\n", err: "x.md:1: doctest marker not followed"},
		{name: "unclosed", src: "a\n```yaml\ndomain: x\n", err: "x.md:2: code block never closed"},
	}
	for i, tt := range tests {
		got, err := parseBlocks("x.md", tt.src)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%d %s: got error %v, want one containing %q", i, tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%d %s: %v", i, tt.name, err)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("%d %s: got %d blocks %+v, want %d", i, tt.name, len(got), got, len(tt.want))
			continue
		}
		for j, w := range tt.want {
			g := got[j]
			if g.line != w.line || g.lang != w.lang || !slices.Equal(g.lines, w.lines) || g.marker != w.marker || g.file != "x.md" {
				t.Errorf("%d %s: block %d: got %+v, want %+v", i, tt.name, j, g, w)
			}
		}
	}
}
