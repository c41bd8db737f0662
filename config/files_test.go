package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const linkRules = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: %d}
`

// secretFile writes a file shaped like /etc/shadow outside any rules
// directory: every line carries a token of its own.
func secretFile(t *testing.T) (path string, tokens []string) {
	t.Helper()
	var b strings.Builder
	for i := range 8 {
		tok := fmt.Sprintf("SECRET%dTOKEN", i)
		tokens = append(tokens, tok)
		fmt.Fprintf(&b, "user%d:$6$%s$hash:19000:0:99999:7:::\n", i, tok)
	}
	path = filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, tokens
}

// load runs LoadRules with a deadline: a loader that blocks (on a FIFO)
// fails the test instead of hanging it.
func load(t *testing.T, paths ...string) (*RuleSet, error) {
	t.Helper()
	type result struct {
		rs  *RuleSet
		err error
	}
	done := make(chan result, 1)
	go func() {
		rs, err := LoadRules(paths...)
		done <- result{rs, err}
	}()
	select {
	case r := <-done:
		return r.rs, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("LoadRules(%v) blocked for 10 s", paths)
		return nil, nil
	}
}

// TestRuleFilesRegularOnly: a FIFO, a socket, a device or a directory
// named like a rule file is refused at once, with an error naming it and
// what it is.
func TestRuleFilesRegularOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), fmt.Appendf(nil, linkRules, 5), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "x.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.yaml")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(dir, "dir.yaml")); err != nil {
		t.Fatal(err)
	}
	_, err = load(t, dir)
	for _, want := range []string{
		filepath.Join(dir, "x.yaml") + ": not a regular file (a named pipe)",
		filepath.Join(dir, "s.yaml") + ": not a regular file (a socket)",
		filepath.Join(dir, "dir.yaml") + ": not a regular file (a directory)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	// Named directly, as `rules validate FILE` does: the same.
	for path, want := range map[string]string{
		filepath.Join(dir, "x.yaml"): "not a regular file (a named pipe)",
		"/dev/null":                  "not a regular file (a character device)",
	} {
		if _, err := load(t, path); err == nil || !strings.Contains(err.Error(), path+": "+want) {
			t.Errorf("%s: got %v, want %q", path, err, want)
		}
	}
	// The watcher's digest reads the same files: it does not block either.
	done := make(chan struct{})
	go func() { _, _ = digest([]string{dir}); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher's digest blocked on a FIFO")
	}
}

// TestRuleFileLinks: a link is followed only while it stays inside the
// rules directory; one that leads out is refused naming where it leads,
// and nothing of the target's content appears in the errors.
func TestRuleFileLinks(t *testing.T) {
	secret, tokens := secretFile(t)
	tests := []struct {
		name string
		make func(t *testing.T, dir string)
		want string // "" loads
	}{
		{"a relative link inside", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "..real", "r.yaml"), fmt.Sprintf(linkRules, 5))
			mustLink(t, "..real/r.yaml", filepath.Join(dir, "x.yaml"))
		}, ""},
		{"a link out of the directory", func(t *testing.T, dir string) {
			mustLink(t, secret, filepath.Join(dir, "x.yaml"))
		}, "x.yaml: a symbolic link to " + secret + ", outside the rules directory"},
		{"a relative link climbing out", func(t *testing.T, dir string) {
			rel, err := filepath.Rel(dir, secret)
			if err != nil {
				t.Fatal(err)
			}
			mustLink(t, rel, filepath.Join(dir, "x.yaml"))
		}, "outside the rules directory"},
		{"a link to a directory that leads out", func(t *testing.T, dir string) {
			mustLink(t, filepath.Dir(secret), filepath.Join(dir, "..data"))
			mustLink(t, "..data/shadow", filepath.Join(dir, "x.yaml"))
		}, "outside the rules directory"},
		{"an absolute link inside", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "..real", "r.yaml"), fmt.Sprintf(linkRules, 5))
			mustLink(t, filepath.Join(dir, "..real", "r.yaml"), filepath.Join(dir, "x.yaml"))
		}, "a symbolic link to an absolute path"},
		{"a dangling link", func(t *testing.T, dir string) {
			mustLink(t, "nowhere.yaml", filepath.Join(dir, "x.yaml"))
		}, "x.yaml: a symbolic link that does not resolve"},
	}
	for i, tc := range tests {
		dir := t.TempDir()
		tc.make(t, dir)
		rs, err := load(t, dir)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("step %d %s: %v", i, tc.name, err)
		case tc.want == "" && rs.Match("d", []Entry{{Key: "k", Value: "v"}}) == nil:
			t.Errorf("step %d %s: the linked rule is not loaded", i, tc.name)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("step %d %s: got %v, want %q", i, tc.name, err, tc.want)
		}
		for _, tok := range tokens {
			if err != nil && strings.Contains(err.Error(), tok) {
				t.Errorf("step %d %s: the error quotes the link's target: %v", i, tc.name, err)
			}
		}
	}
}

// TestConfigMapLayout: the layout of a mounted Kubernetes ConfigMap loads,
// and an atomic swap of ..data (a new timestamped directory, a link
// renamed onto ..data, the old directory removed) is picked up by the
// watcher.
func TestConfigMapLayout(t *testing.T) {
	dir := t.TempDir()
	v1 := "..2026_12_02_01_00_00.123"
	mustWrite(t, filepath.Join(dir, v1, "x.yaml"), fmt.Sprintf(linkRules, 5))
	mustLink(t, v1, filepath.Join(dir, "..data"))
	mustLink(t, "..data/x.yaml", filepath.Join(dir, "x.yaml"))
	rs, err := load(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	r := rs.Match("d", []Entry{{Key: "k", Value: "v"}})
	if r == nil || r.Limit != 5 || r.Pos.File != filepath.Join(dir, "x.yaml") {
		t.Fatalf("rule %+v, want limit 5 read from %s (the name in the directory, not the copy)", r, filepath.Join(dir, "x.yaml"))
	}
	store := NewStore(rs)
	w, err := NewWatcher(store, time.Second, dir)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := w.Check(); changed || err != nil {
		t.Fatalf("nothing changed yet: %v %v", changed, err)
	}
	// The kubelet's update: write the new copy, point a fresh link at it,
	// rename the link onto ..data (atomic), remove the old copy.
	v2 := "..2026_12_02_01_05_00.456"
	mustWrite(t, filepath.Join(dir, v2, "x.yaml"), fmt.Sprintf(linkRules, 9))
	mustLink(t, v2, filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, v1)); err != nil {
		t.Fatal(err)
	}
	changed, err := w.Check()
	if !changed || err != nil {
		t.Fatalf("after the swap: changed %v, %v", changed, err)
	}
	if r := store.Load().Match("d", []Entry{{Key: "k", Value: "v"}}); r == nil || r.Limit != 9 {
		t.Fatalf("after the swap: rule %+v, want limit 9", r)
	}
	// ..data swapped to a directory outside: refused, the last rules stay.
	out := t.TempDir()
	mustWrite(t, filepath.Join(out, "x.yaml"), fmt.Sprintf(linkRules, 1))
	mustLink(t, out, filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if changed, err := w.Check(); changed || err == nil || !strings.Contains(err.Error(), "outside the rules directory") {
		t.Fatalf("..data out of the directory: changed %v, %v", changed, err)
	}
	if r := store.Load().Match("d", []Entry{{Key: "k", Value: "v"}}); r == nil || r.Limit != 9 {
		t.Fatalf("a refused reload replaced the rules: %+v", r)
	}
}

// TestParseErrorsQuoteOneLine: whatever a file holds, an error quotes at
// most the line it points to, however the file folds its lines into one
// value: each line of the file carries its own token, and no error shows
// a token of another line.
func TestParseErrorsQuoteOneLine(t *testing.T) {
	lines := func(format string, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, format, i, i)
		}
		return b.String()
	}
	tests := map[string]string{
		"a shadow file (one plain scalar over every line)": lines("user%d:$6$TOKEN%02d$hash:19000:0:99999:7:::\n", 8),
		"a key file (one scalar, lines of base64)":         "-----BEGIN KEY-----\n" + lines("TOKEN%02dAAAAB3NzaC1yc2EAAAADAQABAAABAQ%02d\n", 8) + "-----END KEY-----\n",
		"a mapping of secrets":                             lines("password%d: TOKEN%02d\n", 8),
		"a descriptor folded over lines":                   "domain: d\ndescriptors:\n  - " + lines("TOKEN%02d part%d\n    ", 8) + "\n",
		"descriptors as a folded scalar":                   "domain: d\ndescriptors: " + lines("TOKEN%02d x%d\n  ", 8) + "\n",
		"a block scalar":                                   "domain: d\ndescriptors: |\n" + lines("  TOKEN%02d %d\n", 8),
		"a quoted scalar over lines":                       "domain: d\ndescriptors: \"" + lines("TOKEN%02d \\x41%d\n  ", 8) + "\"\n",
		"a long line":                                      "domain: d\ndescriptors: " + strings.Repeat("TOKEN00 ", 4000) + "\n" + lines("TOKEN%02d %d\n", 3),
		"a descriptor key folded over lines":               "domain: d\ndescriptors:\n  - key: TOKEN00 a\n      TOKEN01 b\n    burst: 1\n",
		"a pool name folded over lines":                    "domain: d\npools:\n  - name: TOKEN00 a\n      TOKEN01 b\n",
		"an explicit key over lines":                       "domain: d\n? TOKEN00 a\n  TOKEN01 b\n: 1\n",
		"a YAML syntax error":                              lines("TOKEN%02d: [%d\n", 8),
		"tabs":                                             "domain: d\n\tTOKEN01: x\n",
		"an unknown anchor":                                "domain: *TOKEN00\n" + lines("TOKEN%02d: %d\n", 8)[len("TOKEN00: 0\n"):],
	}
	for name, src := range tests {
		_, err := ParseRules("f.yaml", []byte(src))
		var list ErrorList
		if !errors.As(err, &list) {
			t.Errorf("%s: got %v, want an ErrorList", name, err)
			continue
		}
		srcLines := strings.Split(src, "\n")
		quotedLines := map[int]bool{} // lines any error quotes: at most one, or the errors dump the file
		for _, e := range list {
			for i, l := range srcLines {
				for _, tok := range tokensIn(l) {
					if strings.Contains(e.Msg, tok) {
						quotedLines[i] = true
					}
				}
			}
			if strings.ContainsAny(e.Msg, "\n\r") || len(e.Msg) > 4*maxQuoted+512 {
				t.Errorf("%s: a message of %d bytes or over several lines: %q", name, len(e.Msg), e.Msg)
			}
			for i, l := range srcLines {
				if i+1 == e.Line {
					continue
				}
				for _, tok := range tokensIn(l) {
					if !strings.Contains(srcLines[max(e.Line-1, 0)], tok) && strings.Contains(e.Msg, tok) {
						t.Errorf("%s: the error at line %d quotes line %d (%s): %s", name, e.Line, i+1, tok, e.Msg)
					}
				}
			}
		}
		if len(quotedLines) > 1 {
			t.Errorf("%s: the errors quote %d lines of the file between them:\n%v", name, len(quotedLines), err)
		}
	}
}

// FuzzParseErrorsQuoteOneLine: for any file, every error is one line of
// bounded length, and every value it quotes comes from one line of the
// file: the long words (16 letters and digits) of one quoted value are
// all found on a single line.
func FuzzParseErrorsQuoteOneLine(f *testing.F) {
	f.Add([]byte("user0:$6$abcdefghijklmnopqrstu$hash:19000:0:99999:7:::\nuser1:$6$ABCDEFGHIJKLMNOPQRSTU$hash:19000\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: abcdefghijklmnopqrstu a\n      ABCDEFGHIJKLMNOPQRSTU b\n    burst: 1\n"))
	f.Add([]byte("domain: d\ndescriptors: |\n  abcdefghijklmnopqrstu\n  ABCDEFGHIJKLMNOPQRSTU\n"))
	f.Add([]byte("domain: d\npools:\n  - name: abcdefghijklmnopqrstu\n      ABCDEFGHIJKLMNOPQRSTU\n"))
	f.Add([]byte("domain: d\ndescriptors: \"abcdefghijklmnopqrstu\\x41\n  ABCDEFGHIJKLMNOPQRSTU\"\n"))
	f.Add([]byte("-----BEGIN KEY-----\nabcdefghijklmnopqrstuvwxyz0123\nABCDEFGHIJKLMNOPQRSTUVWXYZ0123\n-----END KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := ParseRules("fuzz.yaml", data)
		var list ErrorList
		if err == nil || !errors.As(err, &list) {
			return
		}
		lines := strings.Split(string(data), "\n")
		for _, e := range list {
			if strings.ContainsAny(e.Msg, "\n\r") || len(e.Msg) > 4*maxQuoted+1024 {
				t.Fatalf("a message of %d bytes or over several lines: %q", len(e.Msg), e.Msg)
			}
			for _, q := range quotedIn(e.Msg) {
				ws := words(q)
				if len(ws) < 2 {
					continue
				}
				found := false
				for _, l := range lines {
					all := true
					for _, w := range ws {
						all = all && strings.Contains(l, w)
					}
					found = found || all
				}
				if !found {
					t.Fatalf("the error quotes %q, text of several lines: %s", q, e.Msg)
				}
			}
		}
	})
}

// quotedIn returns the Go-quoted strings of a message, unquoted.
func quotedIn(msg string) []string {
	var out []string
	for i := 0; i < len(msg); i++ {
		if msg[i] != '"' {
			continue
		}
		lit, err := strconv.QuotedPrefix(msg[i:])
		if err != nil {
			continue
		}
		if s, err := strconv.Unquote(lit); err == nil {
			out = append(out, s)
		}
		i += len(lit) - 1
	}
	return out
}

// words returns the runs of at least 16 ASCII letters and digits, one a
// letter at least, of a line: text no message template carries.
func words(line string) []string {
	var out []string
	isWord := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(line); {
		j := i
		for j < len(line) && isWord(line[j]) {
			j++
		}
		if w := line[i:j]; len(w) >= 16 && strings.IndexFunc(w, func(r rune) bool { return r > '9' }) >= 0 {
			out = append(out, w)
		}
		i = j + 1
	}
	return out
}

// tokensIn returns the TOKENnn words of a line.
func tokensIn(line string) []string {
	var out []string
	for {
		i := strings.Index(line, "TOKEN")
		if i < 0 || i+7 > len(line) {
			return out
		}
		out = append(out, line[i:i+7])
		line = line[i+7:]
	}
}

func mustWrite(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustLink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
