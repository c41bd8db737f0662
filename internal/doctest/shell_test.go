package doctest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// command is one shell command of a block, as a shell would read it.
type command struct {
	line     int      // markdown line where it starts
	words    []string // quotes removed, variables expanded
	comment  string   // its documented answer: its trailing comment and the comment lines after it (after a `$ ` prompt: its output), joined by spaces
	problems []string // what a shell would do that the tests do not (an operator, an unknown variable)
}

// isCurl reports whether the command runs curl (after any VAR=value
// assignments), and whether curl appears elsewhere in it (a pipe into it,
// an argument of another command): a curl example the tests cannot run.
func (c command) isCurl() (curl, elsewhere bool) {
	i := 0
	for i < len(c.words) && isAssignment(c.words[i]) {
		i++
	}
	for j, w := range c.words {
		if w == "curl" || strings.HasSuffix(w, "/curl") {
			if j == i {
				curl = true
			} else {
				elsewhere = true
			}
		}
	}
	return curl, elsewhere
}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	return ok && name != "" && strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == ""
}

// parseCommands reads a shell block: lines ending in a backslash continue
// on the next; a `#` starting a word begins a comment; comment lines after
// a command (up to a blank line or the next command) are its comment too.
// In a block with `$ ` prompts only the prompted lines are commands; the
// lines after one, up to a blank line, are its output, which documents its
// answer as a comment would. lookup expands $NAME and ${NAME}; a variable it
// does not know is kept as written and listed in problems.
func parseCommands(b block, lookup func(string) (string, bool)) []command {
	prompted := slices.ContainsFunc(b.lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "$ ") })
	var out []command
	attach := false // comment lines go to the last command
	for i := 0; i < len(b.lines); i++ {
		start := b.line + 1 + i
		line := strings.TrimSpace(b.lines[i])
		if prompted {
			rest, ok := strings.CutPrefix(line, "$ ")
			if !ok { // output: the documented answer of the command above it
				if line == "" {
					attach = false
				} else if attach && len(out) > 0 {
					last := &out[len(out)-1]
					last.comment = strings.TrimSpace(last.comment + " " + line)
				}
				continue
			}
			line = rest
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(b.lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(b.lines[i])
		}
		if line == "" {
			attach = false
			continue
		}
		words, comment, problems := splitWords(line, lookup)
		if len(words) == 0 {
			if attach && len(out) > 0 {
				last := &out[len(out)-1]
				last.comment = strings.TrimSpace(last.comment + " " + comment)
			}
			continue
		}
		out = append(out, command{line: start, words: words, comment: comment, problems: problems})
		attach = true
	}
	return out
}

// splitWords splits one logical line as a POSIX shell does for the forms
// the docs use: 'single' and "double" quotes, backslash escapes, $NAME and
// ${NAME} (not in single quotes), a comment from a `#` that starts a word.
// Operators (| ; & < > ` $( ) are listed in problems, not interpreted.
func splitWords(line string, lookup func(string) (string, bool)) (words []string, comment string, problems []string) {
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	expand := func(s string, i int) int { // s[i] == '$'; returns the index after the variable
		j := i + 1
		braced := j < len(s) && s[j] == '{'
		if braced {
			j++
		}
		k := j
		for k < len(s) && (s[k] == '_' || s[k] >= 'A' && s[k] <= 'Z' || s[k] >= 'a' && s[k] <= 'z' || k > j && s[k] >= '0' && s[k] <= '9') {
			k++
		}
		name := s[j:k]
		if braced {
			if k >= len(s) || s[k] != '}' || name == "" {
				problems = append(problems, fmt.Sprintf("unsupported expansion %q", s[i:]))
				cur.WriteString(s[i:])
				return len(s)
			}
			k++
		}
		if name == "" {
			if k < len(s) && s[k] == '(' {
				problems = append(problems, "command substitution $(...)")
			} else if k < len(s) {
				problems = append(problems, fmt.Sprintf("special parameter $%c", s[k]))
			}
			cur.WriteByte('$')
			return j
		}
		if v, ok := lookup(name); ok {
			cur.WriteString(v)
		} else {
			problems = append(problems, fmt.Sprintf("unknown variable $%s", name))
			cur.WriteString(s[i:k])
		}
		return k
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
			i++
		case c == '#' && !inWord:
			return words, strings.TrimSpace(line[i+1:]), problems
		case c == '\'':
			inWord = true
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				problems = append(problems, "unterminated single quote")
				cur.WriteString(line[i+1:])
				i = len(line)
				break
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 2
		case c == '"':
			inWord = true
			i++
			for i < len(line) && line[i] != '"' {
				switch {
				case line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0:
					cur.WriteByte(line[i+1])
					i += 2
				case line[i] == '$':
					i = expand(line, i)
				case line[i] == '`':
					problems = append(problems, "command substitution `...`")
					cur.WriteByte('`')
					i++
				default:
					cur.WriteByte(line[i])
					i++
				}
			}
			if i >= len(line) {
				problems = append(problems, "unterminated double quote")
			}
			i++
		case c == '\\':
			inWord = true
			if i+1 < len(line) {
				cur.WriteByte(line[i+1])
			}
			i += 2
		case c == '$':
			inWord = true
			i = expand(line, i)
		case strings.IndexByte("|;&<>`()", c) >= 0:
			problems = append(problems, fmt.Sprintf("shell operator %q", c))
			flush()
			i++
		default:
			inWord = true
			cur.WriteByte(c)
			i++
		}
	}
	flush()
	return words, "", problems
}

func TestSplitWords(t *testing.T) {
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"TOKEN": "s3cret", "EMPTY": ""}[name]
		return v, ok
	}
	tests := []struct {
		line     string
		words    []string
		comment  string
		problems []string
	}{
		{line: `curl -s http://x/a`, words: []string{"curl", "-s", "http://x/a"}},
		{line: `curl -d '{"a":"b c"}' x   # {"k":1}`, words: []string{"curl", "-d", `{"a":"b c"}`, "x"}, comment: `{"k":1}`},
		{line: `curl -H "Authorization: Bearer $TOKEN" 'q?a=1&b=$TOKEN'`, words: []string{"curl", "-H", "Authorization: Bearer s3cret", "q?a=1&b=$TOKEN"}},
		{line: `echo ${TOKEN}x "a\"b\$c" a\ b`, words: []string{"echo", "s3cretx", `a"b$c`, "a b"}},
		{line: `echo x#y "#" #z`, words: []string{"echo", "x#y", "#"}, comment: "z"},
		{line: `echo "" $EMPTY`, words: []string{"echo", "", ""}},
		{line: `# only a comment`, comment: "only a comment"},
		{line: `curl $NOPE`, words: []string{"curl", "$NOPE"}, problems: []string{"unknown variable $NOPE"}},
		{line: `curl x | jq .`, words: []string{"curl", "x", "jq", "."}, problems: []string{`shell operator '|'`}},
		{line: `echo $?`, words: []string{"echo", "$?"}, problems: []string{"special parameter $?"}},
		{line: `echo $(date)`, words: []string{"echo", "$", "date"}, problems: []string{"command substitution $(...)", `shell operator '('`, `shell operator ')'`}},
		{line: `echo 'open`, words: []string{"echo", "open"}, problems: []string{"unterminated single quote"}},
	}
	for i, tt := range tests {
		words, comment, problems := splitWords(tt.line, env)
		if !slices.Equal(words, tt.words) || comment != tt.comment || !slices.Equal(problems, tt.problems) {
			t.Errorf("%d %s: got %q, %q, %q; want %q, %q, %q", i, tt.line, words, comment, problems, tt.words, tt.comment, tt.problems)
		}
	}
}

func TestParseCommands(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	b := block{file: "x.md", line: 10, lang: "sh", lines: []string{
		`curl -s -X POST http://localhost:8080/v1/check \`,
		`  -d '{"domain":"api"}'`,
		`# {"decision":"allow",`,
		`#   "statuses":[...]}`,
		``,
		`# a comment before the next command is no answer`,
		`curl -s http://localhost:8080/v1/deferred/T     # {"state":"delivered",...}`,
		`VAR=1 velvetrope check --domain api    # exit 0`,
	}}
	got := parseCommands(b, none)
	want := []command{
		{line: 11, words: []string{"curl", "-s", "-X", "POST", "http://localhost:8080/v1/check", "-d", `{"domain":"api"}`},
			comment: `{"decision":"allow", "statuses":[...]}`},
		{line: 17, words: []string{"curl", "-s", "http://localhost:8080/v1/deferred/T"}, comment: `{"state":"delivered",...}`},
		{line: 18, words: []string{"VAR=1", "velvetrope", "check", "--domain", "api"}, comment: "exit 0"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d commands %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].line != want[i].line || !slices.Equal(got[i].words, want[i].words) || got[i].comment != want[i].comment {
			t.Errorf("command %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	transcript := block{file: "x.md", line: 1, lines: []string{
		"$ velvetrope check --domain api", "allow", "  [0] allow limit=100/minute", "$ curl -s http://localhost:8080/healthz", `{"status":"ok"}`}}
	got = parseCommands(transcript, none)
	if len(got) != 2 || got[0].line != 2 || got[1].words[0] != "curl" || got[1].line != 5 || got[1].comment != `{"status":"ok"}` {
		t.Errorf("transcript: got %+v, want the two prompted lines only", got)
	}
	for i, tt := range []struct {
		words           []string
		curl, elsewhere bool
	}{
		{[]string{"curl", "x"}, true, false},
		{[]string{"A=1", "B=2", "/usr/bin/curl", "x"}, true, false},
		{[]string{"echo", "x", "curl", "y"}, false, true},
		{[]string{"velvetrope", "check"}, false, false},
	} {
		c, e := command{words: tt.words}.isCurl()
		if c != tt.curl || e != tt.elsewhere {
			t.Errorf("isCurl %d %q: got %v %v, want %v %v", i, tt.words, c, e, tt.curl, tt.elsewhere)
		}
	}
}
