package doctest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// shape is the documented form of a JSON answer: JSON in which `...` (or
// `…`) stands for members or elements left out.
type shape struct {
	kind   byte // '{' object, '[' array, '"' string, '0' number, 'b' bool, 'n' null
	keys   []string
	fields map[string]*shape
	elems  []*shape
	open   bool   // members or elements left out
	str    string // a string's value
}

// comparedKeys name the members whose string values an answer must
// match, not only in kind: the decision and the ticket's state. Every
// other value (a count, a time, an id) differs from run to run.
var comparedKeys = []string{"decision", "state", "overallCode", "code"}

// parseShape reads the documented answer in a comment: prose may precede
// it (`over a defer rule: {...}`); the answer is the object from the
// first `{` to its matching `}`, and text after it is ignored.
func parseShape(comment string) (*shape, error) {
	i := strings.IndexByte(comment, '{')
	if i < 0 {
		return nil, fmt.Errorf("no {...} answer in the comment %q", comment)
	}
	p := &shapeParser{s: comment[i:]}
	sh, err := p.value()
	if err != nil {
		return nil, fmt.Errorf("the answer %q: %w", clipText(comment[i:], 80), err)
	}
	return sh, nil
}

// clipText cuts s to n bytes for a message.
func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

type shapeParser struct {
	s   string
	pos int
}

func (p *shapeParser) skip() {
	for p.pos < len(p.s) && strings.IndexByte(" \t\n\r", p.s[p.pos]) >= 0 {
		p.pos++
	}
}

// ellipsis consumes a `...` or `…` placeholder.
func (p *shapeParser) ellipsis() bool {
	p.skip()
	for _, e := range []string{"...", "…"} {
		if strings.HasPrefix(p.s[p.pos:], e) {
			p.pos += len(e)
			return true
		}
	}
	return false
}

func (p *shapeParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *shapeParser) value() (*shape, error) {
	p.skip()
	if p.pos >= len(p.s) {
		return nil, p.errorf("unexpected end")
	}
	switch c := p.s[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.string()
		return &shape{kind: '"', str: s}, err
	case c == '-' || c >= '0' && c <= '9':
		start := p.pos
		for p.pos < len(p.s) && strings.IndexByte("+-.eE0123456789", p.s[p.pos]) >= 0 {
			p.pos++
		}
		var f float64
		if err := json.Unmarshal([]byte(p.s[start:p.pos]), &f); err != nil {
			return nil, p.errorf("bad number %q", p.s[start:p.pos])
		}
		return &shape{kind: '0'}, nil
	}
	for word, kind := range map[string]byte{"true": 'b', "false": 'b', "null": 'n'} {
		if strings.HasPrefix(p.s[p.pos:], word) {
			p.pos += len(word)
			return &shape{kind: kind}, nil
		}
	}
	return nil, p.errorf("unexpected %q", p.s[p.pos:min(p.pos+10, len(p.s))])
}

func (p *shapeParser) string() (string, error) {
	start := p.pos
	p.pos++
	for p.pos < len(p.s) && p.s[p.pos] != '"' {
		if p.s[p.pos] == '\\' {
			p.pos++
		}
		p.pos++
	}
	if p.pos >= len(p.s) {
		return "", p.errorf("unterminated string")
	}
	p.pos++
	var s string
	if err := json.Unmarshal([]byte(p.s[start:p.pos]), &s); err != nil {
		return "", p.errorf("bad string %s: %v", p.s[start:p.pos], err)
	}
	return s, nil
}

// list reads the members or elements of an object or array up to close,
// each with one, or a placeholder.
func (p *shapeParser) list(sh *shape, close byte, one func() error) (*shape, error) {
	p.pos++ // the opening bracket
	p.skip()
	if p.pos < len(p.s) && p.s[p.pos] == close {
		p.pos++
		return sh, nil
	}
	for {
		if p.ellipsis() {
			sh.open = true
		} else if err := one(); err != nil {
			return nil, err
		}
		p.skip()
		if p.pos >= len(p.s) {
			return nil, p.errorf("unexpected end, want %q", close)
		}
		switch p.s[p.pos] {
		case ',':
			p.pos++
		case close:
			p.pos++
			return sh, nil
		default:
			return nil, p.errorf("want ',' or %q, got %q", close, p.s[p.pos])
		}
	}
}

func (p *shapeParser) object() (*shape, error) {
	sh := &shape{kind: '{', fields: map[string]*shape{}}
	return p.list(sh, '}', func() error {
		p.skip()
		if p.pos >= len(p.s) || p.s[p.pos] != '"' {
			return p.errorf("want a member name")
		}
		k, err := p.string()
		if err != nil {
			return err
		}
		if _, dup := sh.fields[k]; dup {
			return p.errorf("member %q twice", k)
		}
		p.skip()
		if p.pos >= len(p.s) || p.s[p.pos] != ':' {
			return p.errorf("want ':' after %q", k)
		}
		p.pos++
		v, err := p.value()
		if err != nil {
			return err
		}
		sh.keys, sh.fields[k] = append(sh.keys, k), v
		return nil
	})
}

func (p *shapeParser) array() (*shape, error) {
	sh := &shape{kind: '['}
	return p.list(sh, ']', func() error {
		v, err := p.value()
		if err == nil {
			sh.elems = append(sh.elems, v)
		}
		return err
	})
}

// kindOf names the JSON kind of a decoded value as shape.kind does.
func kindOf(v any) byte {
	switch v.(type) {
	case map[string]any:
		return '{'
	case []any:
		return '['
	case string:
		return '"'
	case float64, json.Number:
		return '0'
	case bool:
		return 'b'
	}
	return 'n'
}

var kindNames = map[byte]string{'{': "an object", '[': "an array", '"': "a string", '0': "a number", 'b': "a boolean", 'n': "null"}

// check lists how got (decoded JSON) differs from the documented shape:
// a member documented and missing, a member not documented in an object
// without `...`, a value of another kind, a compared value (decision,
// state) that differs, an array of another length unless it has `...`
// (then the elements present are checked against those documented).
func (sh *shape) check(got any, path string) []string {
	if k := kindOf(got); k != sh.kind {
		return []string{fmt.Sprintf("%s: got %s, documented %s", pathOr(path), kindNames[k], kindNames[sh.kind])}
	}
	var diffs []string
	switch sh.kind {
	case '{':
		obj := got.(map[string]any)
		for _, k := range sh.keys {
			v, ok := obj[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: documented, not in the answer", path, k))
				continue
			}
			want := sh.fields[k]
			if s, isStr := v.(string); isStr && want.kind == '"' && slices.Contains(comparedKeys, k) && s != want.str {
				diffs = append(diffs, fmt.Sprintf("%s.%s: got %q, documented %q", path, k, s, want.str))
				continue
			}
			diffs = append(diffs, want.check(v, path+"."+k)...)
		}
		if !sh.open {
			var extra []string
			for k := range obj {
				if _, ok := sh.fields[k]; !ok {
					extra = append(extra, k)
				}
			}
			slices.Sort(extra)
			for _, k := range extra {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the answer, not documented (add it, or end the object with ...)", path, k))
			}
		}
	case '[':
		arr := got.([]any)
		if !sh.open && len(arr) != len(sh.elems) {
			diffs = append(diffs, fmt.Sprintf("%s: %d elements, documented %d (end the array with ... if it varies)", pathOr(path), len(arr), len(sh.elems)))
		}
		for i, e := range sh.elems {
			if i < len(arr) {
				diffs = append(diffs, e.check(arr[i], fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return diffs
}

func pathOr(path string) string {
	if path == "" {
		return "the answer"
	}
	return path
}

// progressions are the values a compared member passes through on its way
// to a documented one: a key allowed until its budget is spent, a ticket
// queued until it is delivered. An answer still at an earlier value is
// asked again; any other difference fails at once.
var progressions = map[string]map[string][]string{
	"decision":    {"allow": {"deny", "defer"}},
	"overallCode": {"OK": {"OVER_LIMIT"}},
	"state":       {"queued": {"delivered", "expired", "failed"}},
}

// pending reports whether got's top-level compared values are on their
// way to the documented ones (and which member, for the log).
func (sh *shape) pending(got any) (string, bool) {
	obj, ok := got.(map[string]any)
	if !ok || sh.kind != '{' {
		return "", false
	}
	for k, from := range progressions {
		want, ok := sh.fields[k]
		if !ok || want.kind != '"' {
			continue
		}
		if g, _ := obj[k].(string); slices.Contains(from[g], want.str) {
			return fmt.Sprintf("%s %s, documented %s", k, g, want.str), true
		}
	}
	return "", false
}

func TestParseShape(t *testing.T) {
	tests := []struct {
		comment string
		want    string // the shape printed by describe
		err     string
	}{
		{comment: `{"decision":"allow","statuses":[{"decision":"allow","limit":100}]}`,
			want: `{decision:"allow" statuses:[{decision:"allow" limit:0}]}`},
		{comment: `over a defer rule: {"decision":"defer","ticket":"q3","retry_after_ms":1000,...}`,
			want: `{decision:"defer" ticket:"q3" retry_after_ms:0 ...}`},
		{comment: `{"state":"delivered", …} trailing prose (with parentheses)`, want: `{state:"delivered" ...}`},
		{comment: `{"a":[...],"b":[{"x":true}, ...],"c":null,"d":-1.5e3,"e":"q\"uote"}`,
			want: `{a:[...] b:[{x:b} ...] c:n d:0 e:"q\"uote"}`},
		{comment: `{}`, want: `{}`},
		{comment: `200 until the limit, then 429`, err: "no {...} answer"},
		{comment: `{"a":1`, err: "unexpected end"},
		{comment: `{"a" 1}`, err: `want ':' after "a"`},
		{comment: `{"a":1 "b":2}`, err: "want ',' or '}'"},
		{comment: `{"a":1,"a":2}`, err: `member "a" twice`},
		{comment: `{a:1}`, err: "want a member name"},
		{comment: `{"a":nope}`, err: "unexpected"},
	}
	for i, tt := range tests {
		sh, err := parseShape(tt.comment)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%d %s: got error %v, want one containing %q", i, tt.comment, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%d %s: %v", i, tt.comment, err)
			continue
		}
		if got := describe(sh); got != tt.want {
			t.Errorf("%d %s: got %s, want %s", i, tt.comment, got, tt.want)
		}
	}
}

// describe prints a shape compactly, for the tests.
func describe(sh *shape) string {
	var parts []string
	switch sh.kind {
	case '{':
		for _, k := range sh.keys {
			parts = append(parts, k+":"+describe(sh.fields[k]))
		}
	case '[':
		for _, e := range sh.elems {
			parts = append(parts, describe(e))
		}
	case '"':
		return fmt.Sprintf("%q", sh.str)
	default:
		return string(sh.kind)
	}
	if sh.open {
		parts = append(parts, "...")
	}
	if sh.kind == '{' {
		return "{" + strings.Join(parts, " ") + "}"
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func TestShapeCheck(t *testing.T) {
	doc := `{"decision":"defer","ticket":"q3Yw","statuses":[{"decision":"defer","limit":10}],...}`
	tests := []struct {
		doc, answer string
		diffs       []string
		pending     bool
	}{
		{doc: doc, answer: `{"decision":"defer","ticket":"abc","retry_after_ms":5,"statuses":[{"decision":"defer","limit":7}]}`},
		{doc: doc, answer: `{"decision":"allow","statuses":[{"decision":"allow","limit":10}]}`, pending: true,
			diffs: []string{`.decision: got "allow", documented "defer"`, ".ticket: documented, not in the answer", `.statuses[0].decision: got "allow", documented "defer"`}},
		{doc: doc, answer: `{"decision":"deny","ticket":"x","statuses":[{"decision":"deny","limit":10}]}`,
			diffs: []string{`.decision: got "deny", documented "defer"`, `.statuses[0].decision: got "deny", documented "defer"`}},
		{doc: doc, answer: `{"decision":"defer","ticket":"x","statuses":[{"decision":"defer","limit":"10","extra":1}]}`,
			diffs: []string{".statuses[0].limit: got a string, documented a number", ".statuses[0].extra: in the answer, not documented (add it, or end the object with ...)"}},
		{doc: doc, answer: `{"decision":"defer","ticket":"x","statuses":[]}`,
			diffs: []string{".statuses: 0 elements, documented 1 (end the array with ... if it varies)"}},
		{doc: doc, answer: `[1]`, diffs: []string{"the answer: got an array, documented an object"}},
		{doc: `{"window":"1h","keys":[{"domain":"api"}, ...]}`, answer: `{"window":"1h","keys":[]}`},
		{doc: `{"window":"1h","keys":[{"domain":"api"}, ...]}`, answer: `{"window":"1h","keys":[{"domain":7}]}`,
			diffs: []string{".keys[0].domain: got a number, documented a string"}},
		{doc: `{"state":"delivered",...}`, answer: `{"state":"queued","attempts":0}`, pending: true,
			diffs: []string{`.state: got "queued", documented "delivered"`}},
		{doc: `{"state":"delivered",...}`, answer: `{"state":"failed"}`, diffs: []string{`.state: got "failed", documented "delivered"`}},
		{doc: `{"overallCode":"OVER_LIMIT",...}`, answer: `{"overallCode":"OK"}`, pending: true,
			diffs: []string{`.overallCode: got "OK", documented "OVER_LIMIT"`}},
		{doc: `{"id":"891a","action":"deny"}`, answer: `{"id":"77","action":"deny"}`},
	}
	for i, tt := range tests {
		sh, err := parseShape(tt.doc)
		if err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal([]byte(tt.answer), &got); err != nil {
			t.Fatal(err)
		}
		diffs := sh.check(got, "")
		if !slices.Equal(diffs, tt.diffs) {
			t.Errorf("%d %s: got diffs %q, want %q", i, tt.answer, diffs, tt.diffs)
		}
		if _, p := sh.pending(got); p != tt.pending {
			t.Errorf("%d %s: pending: got %v, want %v", i, tt.answer, p, tt.pending)
		}
	}
}
