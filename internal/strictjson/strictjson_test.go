package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

type tEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type tDesc struct {
	Entries []tEntry `json:"entries"`
	Hits    *int64   `json:"hits,omitempty"`
}

type tEmbedded struct {
	Reason string `json:"reason,omitempty"`
}

type tReq struct {
	Domain      string            `json:"domain"`
	Descriptors []tDesc           `json:"descriptors"`
	Hits        *int64            `json:"hits,omitempty"`
	Small       int8              `json:"small,omitempty"`
	Count       uint32            `json:"count,omitempty"`
	Ratio       float64           `json:"ratio,omitempty"`
	On          bool              `json:"on,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Raw         json.RawMessage   `json:"raw,omitempty"`
	Blob        []byte            `json:"blob,omitempty"`
	Any         any               `json:"any,omitempty"`
	tEmbedded
	skipped string // an unexported field is no JSON field
	Ignored string `json:"-"`
}

var tBounds = []Bound{
	{Path: "descriptors", Max: 2, What: "descriptors"},
	{Path: "descriptors.entries", Max: 3, What: "entries"},
	{Path: "descriptors.entries.key", Max: 4, What: "bytes"},
	{Path: "descriptors.entries.value", Max: 8, What: "bytes"},
}

var tSchema = MustFor[tReq](tBounds...)

var _ = tReq{}.skipped // read here only: encoding/json never does

// TestDecode pins what the scan accepts and refuses, and the field and
// message of every refusal.
func TestDecode(t *testing.T) {
	deep := `{"any":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`
	many := `{"headers":{`
	for i := range 20 {
		many += `"h` + string(rune('a'+i)) + `":"v",`
	}
	cases := []struct {
		name, body string
		field, msg string // "" for accepted
	}{
		{"everything", `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits":2}],"hits":1,"small":-128,` +
			`"count":4294967295,"ratio":1.5e3,"on":true,"headers":{"a":"1"},"raw":[1, {"x":null}],"blob":"aGk=","any":{"y":[true,null,"s",1]},"reason":"r"}`, "", ""},
		{"nulls", `{"domain":null,"descriptors":null,"hits":null,"headers":null,"any":null}`, "", ""},
		{"white space", " \t\r\n{ \"domain\" : \"a\" , \"descriptors\" : [ ] } \n", "", ""},
		{"escapes", `{"domain":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}`, "", ""},
		{"other case", `{"Domain":"shop"}`, "Domain", `unknown field (names are case-sensitive: the field is "domain")`},
		{"unknown", `{"domainz":"shop"}`, "domainz", "unknown field"},
		{"unexported", `{"skipped":"x"}`, "skipped", "unknown field"},
		{"json -", `{"Ignored":"x"}`, "Ignored", "unknown field"},
		{"nested unknown", `{"descriptors":[{"entries":[{"key":"k","Value":"v"}]}]}`, "descriptors[0].entries[0].Value", "unknown field"},
		{"duplicate", `{"domain":"api","domain":"shop"}`, "domain", "duplicate field"},
		{"duplicate, escaped", `{"domain":"api","dom\u0061in":"shop"}`, "domain", "duplicate field"},
		{"duplicate header", `{"headers":{"a":"1","a":"2"}}`, "headers.a", "duplicate field"},
		{"duplicate past 16 names", many + `"ha":"again"}}`, "headers.ha", "duplicate field"},
		{"duplicate in any", `{"any":{"x":1,"x":2}}`, "any.x", "duplicate field"},
		{"invalid UTF-8", "{\"domain\":\"a\xffb\"}", "domain", "not valid UTF-8"},
		{"UTF-8 surrogate bytes", "{\"domain\":\"\xed\xa0\x80\"}", "domain", "not valid UTF-8"},
		{"truncated UTF-8", "{\"domain\":\"\xc3\"}", "domain", "not valid UTF-8"},
		{"lone high surrogate", `{"domain":"a\ud800b"}`, "domain", `lone UTF-16 surrogate (\ud800)`},
		{"high then not low", `{"domain":"\ud800\u0041"}`, "domain", `lone UTF-16 surrogate (\ud800)`},
		{"high at the end", `{"domain":"\ud800"}`, "domain", `lone UTF-16 surrogate`},
		{"lone low surrogate", `{"domain":"\udc00"}`, "domain", `lone UTF-16 surrogate (\udc00)`},
		{"surrogate in a name", `{"any":[{"\ud800":1}]}`, "any[0]", "a field name: a lone UTF-16 surrogate"},
		{"invalid UTF-8 in a header", "{\"headers\":{\"h\":\"\xff\"}}", "headers.h", "not valid UTF-8"},
		{"descriptors at the bound", `{"descriptors":[{},{}]}`, "", ""},
		{"descriptors past the bound", `{"descriptors":[{},{},{}]}`, "descriptors", "more than 2 descriptors"},
		{"entries past the bound", `{"descriptors":[{},{"entries":[{},{},{},{}]}]}`, "descriptors[1].entries", "more than 3 entries"},
		{"key past the bound", `{"descriptors":[{"entries":[{"key":"abcde"}]}]}`, "descriptors[0].entries[0].key", "longer than 4 bytes"},
		{"value at the bound, escaped", `{"descriptors":[{"entries":[{"value":"\u00e9\u00e9\u00e9\u00e9"}]}]}`, "", ""},
		{"value past the bound, escaped", `{"descriptors":[{"entries":[{"value":"\u00e9\u00e9\u00e9\u00e9\u00e9"}]}]}`, "descriptors[0].entries[0].value", "longer than 8 bytes"},
		{"value past the bound, pairs", `{"descriptors":[{"entries":[{"value":"\ud83d\ude00\ud83d\ude00\ud83d\ude00"}]}]}`, "descriptors[0].entries[0].value", "longer than 8 bytes"},
		{"value past the bound, UTF-8", `{"descriptors":[{"entries":[{"value":"ééééé"}]}]}`, "descriptors[0].entries[0].value", "longer than 8 bytes"},
		{"fraction for an integer", `{"hits":1.5}`, "hits", "want an integer, got 1.5"},
		{"exponent for an integer", `{"hits":1e3}`, "hits", "want an integer, got 1e3"},
		{"int64 max", `{"hits":9223372036854775807}`, "", ""},
		{"int64 min", `{"hits":-9223372036854775808}`, "", ""},
		{"above int64", `{"hits":9223372036854775808}`, "hits", "out of range (64 bits)"},
		{"2^64", `{"hits":18446744073709551616}`, "hits", "out of range"},
		{"below int64", `{"hits":-9223372036854775809}`, "hits", "out of range"},
		{"int8 overflow", `{"small":128}`, "small", "out of range (8 bits)"},
		{"negative uint", `{"count":-1}`, "count", "want a non-negative integer, got -1"},
		{"uint32 overflow", `{"count":4294967296}`, "count", "out of range (32 bits)"},
		{"quoted integer", `{"hits":"5"}`, "hits", "want an integer, got a string"},
		{"per-descriptor hits", `{"descriptors":[{"hits":1.5}]}`, "descriptors[0].hits", "want an integer"},
		{"number for a bool", `{"on":1}`, "on", "want true or false, got a number"},
		{"object for a string", `{"domain":{}}`, "domain", "want a string, got an object"},
		{"string for an array", `{"descriptors":"x"}`, "descriptors", "want an array, got a string"},
		{"array at the top", `[1,2,3]`, "body", "want an object, got an array"},
		{"too deep", deep, "body", "nested deeper than 64 levels"},
		{"empty", ``, "body", "empty; want a JSON object"},
		{"blank", " \n ", "body", "empty; want a JSON object"},
		{"two values", `{} {}`, "body", "trailing data after the JSON value"},
		{"missing value", `{"domain":}`, "body", "malformed JSON at byte 10"},
		{"truncated", `{"domain":"a"`, "body", "unexpected end of the body"},
		{"trailing comma", `{"domain":"a",}`, "body", "want a field name"},
		{"unterminated string", `{"domain":"a`, "body", "unterminated string"},
		{"control character", "{\"domain\":\"a\nb\"}", "body", "control character"},
		{"bad escape", `{"domain":"\x"}`, "body", `bad escape \x`},
		{"bad \\u", `{"domain":"\u12"}`, "body", `bad \u escape`},
		{"leading zero", `{"hits":01}`, "body", "want ',' or '}'"},
		{"bare minus", `{"hits":-}`, "body", "want a digit"},
		{"bad literal", `{"on":tru}`, "body", "want true"},
		{"single quotes", `{'domain':1}`, "body", "want a field name"},
		{"bad base64", `{"blob":"!!"}`, "body", "illegal base64"},
		{"float range", `{"ratio":1e400}`, "ratio", "want float64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got tReq
			err := tSchema.Decode([]byte(c.body), &got)
			if c.field == "" {
				if err != nil {
					t.Fatalf("Decode(%s): %v, want it accepted", c.body, err)
				}
				var want tReq
				dec := json.NewDecoder(strings.NewReader(c.body))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&want); err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("Decode(%s) = %+v, encoding/json %+v (%v)", c.body, got, want, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Field != c.field || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("Decode(%s): %#v, want 400 field %q message containing %q", c.body, err, c.field, c.msg)
			}
			if !reflect.DeepEqual(got, tReq{}) && !strings.HasPrefix(c.name, "bad base64") && c.name != "float range" {
				t.Fatalf("Decode(%s) refused but decoded %+v", c.body, got)
			}
		})
	}
}

// TestSchemaErrors: what For and bounds refuse, at construction.
func TestSchemaErrors(t *testing.T) {
	type stringOpt struct {
		N int `json:"n,string"`
	}
	type twice struct {
		tEmbedded        // reason
		Why       string `json:"reason"`
	}
	type withChan struct {
		C chan int `json:"c"`
	}
	for name, err := range map[string]error{
		",string":         func() error { _, err := For[stringOpt](); return err }(),
		"a name twice":    func() error { _, err := For[twice](); return err }(),
		"a channel":       func() error { _, err := For[withChan](); return err }(),
		"no such field":   func() error { _, err := For[tReq](Bound{Path: "descriptors.entrys", Max: 1, What: "x"}); return err }(),
		"bound on an int": func() error { _, err := For[tReq](Bound{Path: "hits", Max: 1, What: "x"}); return err }(),
		"no unit":         func() error { _, err := For[tReq](Bound{Path: "domain", Max: 1}); return err }(),
		"zero bound":      func() error { _, err := For[tReq](Bound{Path: "domain", Max: 0, What: "bytes"}); return err }(),
		"proto: no field": func() error {
			_, err := ForProto(&rlsv3.RateLimitRequest{}, Bound{Path: "hitsAddend", Max: 1, What: "x"})
			return err
		}(),
		"proto: not array": func() error {
			_, err := ForProto(&rlsv3.RateLimitRequest{}, Bound{Path: "hits_addend", Max: 1, What: "x"})
			return err
		}(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSharedTypesAreBoundSeparately: two fields of one Go type get
// their own bounds.
func TestSharedTypesAreBoundSeparately(t *testing.T) {
	type pair struct {
		A []tEntry `json:"a"`
		B []tEntry `json:"b"`
	}
	s := MustFor[pair](Bound{Path: "a", Max: 1, What: "entries"})
	var v pair
	if err := s.Decode([]byte(`{"b":[{},{},{}]}`), &v); err != nil {
		t.Fatalf("b took a's bound: %v", err)
	}
	if err := s.Decode([]byte(`{"a":[{},{}]}`), &v); err == nil || !strings.Contains(err.Error(), "a: more than 1 entries") {
		t.Fatalf("a: %v", err)
	}
}

var rlsSchema = MustForProto(&rlsv3.RateLimitRequest{},
	Bound{Path: "descriptors", Max: 2, What: "descriptors"},
	Bound{Path: "descriptors.entries", Max: 3, What: "entries"},
	Bound{Path: "descriptors.entries.value", Max: 8, What: "bytes"})

// TestProto: protojson's names (JSON and proto, not both), its quoted
// integers and enum names, bounds by proto names.
func TestProto(t *testing.T) {
	cases := []struct{ body, field, msg string }{
		{`{"domain":"rl","hitsAddend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":4,"unit":"MINUTE"},"hitsAddend":"3"}]}`, "", ""},
		{`{"domain":"rl","hits_addend":"2","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":4,"unit":2},"is_negative_hits":false}]}`, "", ""},
		{`{"domain":"rl","hitsAddend":1,"hits_addend":2}`, "hits_addend", "duplicate field (a field of two names, hitsAddend and hits_addend: give one, once)"},
		{`{"domain":"rl","domain":"x"}`, "domain", "duplicate field"},
		{`{"Domain":"rl"}`, "Domain", `names are case-sensitive: the field is "domain"`},
		{`{"descriptors":[{},{},{}]}`, "descriptors", "more than 2 descriptors"},
		{`{"descriptors":[{"entries":[{},{},{},{}]}]}`, "descriptors[0].entries", "more than 3 entries"},
		{`{"descriptors":[{"entries":[{"value":"123456789"}]}]}`, "descriptors[0].entries[0].value", "longer than 8 bytes"},
		{"{\"descriptors\":[{\"entries\":[{\"value\":\"\xff\"}]}]}", "descriptors[0].entries[0].value", "not valid UTF-8"},
		{`{"descriptors":[{"entries":[{"value":"\udfff"}]}]}`, "descriptors[0].entries[0].value", "lone UTF-16 surrogate"},
		{`{"descriptors":[{"hitsAddend":true}]}`, "descriptors[0].hits_addend", "want a number, got a boolean"},
		{`{"domain":"rl","descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}`, "body", "invalid value for enum"},
	}
	for i, c := range cases {
		var m rlsv3.RateLimitRequest
		err := rlsSchema.Decode([]byte(c.body), &m)
		if c.field == "" {
			if err != nil {
				t.Fatalf("case %d %s: %v", i, c.body, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Field != c.field || !strings.Contains(e.Msg, c.msg) {
			t.Fatalf("case %d %s: %v, want field %q message containing %q", i, c.body, err, c.field, c.msg)
		}
	}
}

// TestRead: the body is bounded before it is read when its length is
// declared, at the bound when it is not; what is read is decoded.
func TestRead(t *testing.T) {
	read := func(body string, contentLength int64) (*httptest.ResponseRecorder, error) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.ContentLength = contentLength
		w := httptest.NewRecorder()
		var v tReq
		return w, tSchema.Read(w, r, 64, &v)
	}
	if _, err := read(`{"domain":"a"}`, 14); err != nil {
		t.Fatalf("a small body: %v", err)
	}
	w, err := read(`{"domain":"a"}`, 1<<30) // declared, never sent
	var e *Error
	if !errors.As(err, &e) || e.Status != 413 || !strings.Contains(e.Msg, "Content-Length 1073741824") || w.Header().Get("Connection") != "close" {
		t.Fatalf("a declared 1 GiB: %v, Connection %q", err, w.Header().Get("Connection"))
	}
	if _, err := read(`{"domain":"`+strings.Repeat("a", 100)+`"}`, -1); !errors.As(err, &e) || e.Status != 413 {
		t.Fatalf("an undeclared body past the bound: %v", err)
	}
	if _, err := read(`{"domain":1}`, -1); !errors.As(err, &e) || e.Status != 400 || e.Field != "domain" {
		t.Fatalf("a bad body: %v", err)
	}
	r := httptest.NewRequest(http.MethodPost, "/", io.MultiReader(strings.NewReader(`{"dom`), errReader{}))
	if err := tSchema.Read(httptest.NewRecorder(), r, 64, &tReq{}); !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Msg, "reading") {
		t.Fatalf("a failing body: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// TestScanAllocatesNothing: a valid body without escaped names costs the
// scan no allocation.
func TestScanAllocatesNothing(t *testing.T) {
	body := []byte(`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v\u00e9"}],"hits":2}],"hits":1,"on":true}`)
	if n := testing.AllocsPerRun(100, func() {
		sc := scanner{data: body}
		if err := sc.value(tSchema.root); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("the scan allocated %v times", n)
	}
}

// FuzzDecode: any bytes decode without a panic; what is accepted is valid
// JSON and UTF-8, has no name twice in an object, is what encoding/json
// decodes from it (unknown fields refused), respects every bound, and
// survives a round trip through json.Marshal.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits":2}],"hits":1}`,
		`{"domain":"api","Domain":"shop"}`, `{"domain":"a","domain":"b"}`, "{\"domain\":\"\xff\"}", `{"domain":"\ud800"}`,
		`{"descriptors":[{"entries":[{},{},{},{}]}]}`, `{"headers":{"a":"1","b":"2"},"any":[{"x":{"y":null}}],"raw":{"q":1}}`,
		`{"hits":9223372036854775808}`, `{"small":-128,"count":4294967295,"ratio":-0.5e-3,"blob":"aGk="}`,
		`{"descriptors":[{"entries":[` + strings.Repeat(`{},`, 2000) + `{}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got tReq
		if err := tSchema.Decode(data, &got); err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Field == "" || e.Msg == "" || (e.Status != 400) {
				t.Fatalf("refusal %#v: want an *Error with a field and a message", err)
			}
			return
		}
		if !json.Valid(data) || !utf8.Valid(data) {
			t.Fatalf("accepted %q: not valid JSON or UTF-8", data)
		}
		if err := noDuplicates(data); err != nil {
			t.Fatalf("accepted %q: %v", data, err)
		}
		var want tReq
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&want); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("accepted %q as %+v; encoding/json: %+v, %v", data, got, want, err)
		}
		if len(got.Descriptors) > 2 {
			t.Fatalf("accepted %d descriptors", len(got.Descriptors))
		}
		for _, d := range got.Descriptors {
			if len(d.Entries) > 3 {
				t.Fatalf("accepted %d entries", len(d.Entries))
			}
			for _, e := range d.Entries {
				if len(e.Key) > 4 || len(e.Value) > 8 || !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
					t.Fatalf("accepted entry %q", e)
				}
			}
		}
		out, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var again tReq
		if err := tSchema.Decode(out, &again); err != nil {
			t.Fatalf("the round trip of %q (%s) is refused: %v", data, out, err)
		}
		if out2, _ := json.Marshal(again); !bytes.Equal(out, out2) {
			t.Fatalf("round trip: %s then %s", out, out2)
		}
	})
}

// noDuplicates is the reference check: no object of data has a name
// twice (names compared as decoded).
func noDuplicates(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		names  map[string]bool
		key    bool // the next string token of an object is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{object: v == '{', names: map[string]bool{}, key: v == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.object && top.key {
				if top.names[v] {
					return errors.New("name " + v + " twice")
				}
				top.names[v] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.object {
			top.key = true
		}
	}
}
