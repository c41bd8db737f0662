package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
)

type fixedClock int64

func (c fixedClock) Now() int64 { return int64(c) }

// t0 is 10 s into a minute.
const t0 = int64(1_700_006_410) * 1e9

func newHandler(t testing.TB) http.Handler {
	t.Helper()
	rs, err := config.ExampleRules()
	if err != nil {
		t.Fatal(err)
	}
	k, _ := limiter.NewKeyed()
	l, err := local.New(config.NewStore(rs), k, fixedClock(t0), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return CheckHandler(l, 1024, nil, nil)
}

func post(t *testing.T, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
	return rec
}

func TestCheckContract(t *testing.T) {
	h := newHandler(t)
	rec := post(t, h, `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hits":1}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got httpjson.CheckResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := httpjson.CheckResponse{Decision: "allow", Statuses: []httpjson.Status{{Decision: "allow", Rule: "api:user_id", Limit: 100,
		Unit: "minute", Remaining: 99, ResetAfterMS: 600, RetryAfterMS: 0}}}
	if got.Decision != want.Decision || len(got.Statuses) != 1 || got.Statuses[0] != want.Statuses[0] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	hdr := rec.Header()
	for name, want := range map[string]string{
		"RateLimit-Policy": `"api:user_id";q=100;w=60`, "RateLimit": `"api:user_id";r=99;t=1`,
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99", "X-RateLimit-Reset": "1", "Retry-After": "",
	} {
		if got := hdr.Get(name); got != want {
			t.Fatalf("%s: got %q, want %q", name, got, want)
		}
	}
}

func TestCheckHitsDefaultsAndProbe(t *testing.T) {
	h := newHandler(t)
	body := func(hits string) string {
		return `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"u"}]}]` + hits + `}`
	}
	steps := []struct {
		hits string
		rem  int64
	}{{"", 99}, {`,"hits":0`, 99}, {`,"hits":5`, 94}, {`,"hits":0`, 94}}
	for i, s := range steps {
		var got httpjson.CheckResponse
		json.Unmarshal(post(t, h, body(s.hits)).Body.Bytes(), &got)
		if got.Statuses[0].Remaining != s.rem {
			t.Fatalf("step %d (%s): remaining %d, want %d", i, s.hits, got.Statuses[0].Remaining, s.rem)
		}
	}
}

func TestCheckDeniedHeaders(t *testing.T) {
	h := newHandler(t)
	login := `{"domain":"api","descriptors":[{"entries":[{"key":"login","value":"p"}]}]}`
	for range 5 {
		post(t, h, login)
	}
	rec := post(t, h, login)
	var got httpjson.CheckResponse
	json.Unmarshal(rec.Body.Bytes(), &got)
	if rec.Code != 200 || got.Decision != "deny" || got.Statuses[0].RetryAfterMS != 60000 {
		t.Fatalf("got %d %+v, want 200 deny retry 60000ms", rec.Code, got)
	}
	if ra := rec.Header().Get("Retry-After"); ra != "60" {
		t.Fatalf("Retry-After: got %q, want 60", ra)
	}
	if rem := rec.Header().Get("X-RateLimit-Remaining"); rem != "0" {
		t.Fatalf("X-RateLimit-Remaining: got %q", rem)
	}
	// hits that can never fit: denied, no Retry-After
	rec = post(t, h, `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"x"}]}],"hits":101}`)
	json.Unmarshal(rec.Body.Bytes(), &got)
	if got.Decision != "deny" || !got.Statuses[0].RetryNever || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("never-fitting hits: %+v, Retry-After %q", got, rec.Header().Get("Retry-After"))
	}
}

func TestCheckBadRequests(t *testing.T) {
	h := newHandler(t)
	cases := []struct {
		name, body string
		status     int
		field      string
	}{
		{"malformed JSON", `{"domain":`, 400, "body"},
		{"syntax error", `{"domain" "api"}`, 400, "body"},
		{"empty body", ``, 400, "body"},
		{"two values", `{} {}`, 400, "body"},
		{"unknown field", `{"domain":"api","descriptorz":[]}`, 400, "descriptorz"},
		{"wrong type", `{"domain":"api","hits":"one"}`, 400, "hits"},
		{"unknown domain", `{"domain":"apx","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, 400, "domain"},
		{"missing domain", `{"descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, 400, "domain"},
		{"empty descriptors", `{"domain":"api","descriptors":[]}`, 400, "descriptors"},
		{"empty entries", `{"domain":"api","descriptors":[{"entries":[]}]}`, 400, "descriptors[0].entries"},
		{"negative hits", `{"domain":"api","descriptors":[{"entries":[{"key":"a","value":"b"}]}],"hits":-1}`, 400, "hits"},
		{"too large", `{"domain":"` + strings.Repeat("a", 2000) + `"}`, 413, "body"},
		// issue 19: strict JSON, bounds as the body is read
		{"other case", `{"domain":"api","Domain":"shop","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, 400, "Domain"},
		{"duplicate", `{"domain":"api","domain":"shop","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, 400, "domain"},
		{"invalid UTF-8", "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"a\",\"value\":\"\xc0\xaf\"}]}]}", 400, "descriptors[0].entries[0].value"},
		{"lone surrogate", `{"domain":"api","descriptors":[{"entries":[{"key":"a\udbff","value":"b"}]}]}`, 400, "descriptors[0].entries[0].key"},
		{"entries past the bound", `{"domain":"api","descriptors":[{"entries":[{},{},{},{},{},{},{},{},{}]}]}`, 400, "descriptors[0].entries"},
		{"descriptors past the bound", `{"domain":"api","descriptors":[` + strings.Repeat(`{},`, 16) + `{}]}`, 400, "descriptors"},
		{"request id past the bound", `{"domain":"api","request_id":"` + strings.Repeat("i", 129) + `","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, 400, "request_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := post(t, h, c.body)
			var e httpjson.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("error body is not JSON: %q", rec.Body)
			}
			if rec.Code != c.status || e.Field != c.field || e.Error == "" {
				t.Fatalf("got %d field %q (%s), want %d field %q", rec.Code, e.Field, e.Error, c.status, c.field)
			}
		})
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/check", nil))
	if rec.Code != 405 || rec.Header().Get("Allow") != "POST" {
		t.Fatalf("GET: got %d", rec.Code)
	}
}

// unreadable is a body that fails the test if it is read.
type unreadable struct{ t *testing.T }

func (u unreadable) Read([]byte) (int, error) {
	u.t.Error("the body was read")
	return 0, io.EOF
}

// TestCheckRefusesADeclaredOversizeUnread: a Content-Length above the
// bound is 413 before a byte of the body is read, and the connection is
// not kept for another request.
func TestCheckRefusesADeclaredOversizeUnread(t *testing.T) {
	h := newHandler(t)
	r := httptest.NewRequest(http.MethodPost, "/v1/check", unreadable{t})
	r.ContentLength = 1 << 30
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var e httpjson.ErrorResponse
	if rec.Code != 413 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Field != "body" || rec.Header().Get("Connection") != "close" {
		t.Fatalf("got %d %s (Connection %q), want 413 naming body, Connection: close", rec.Code, rec.Body, rec.Header().Get("Connection"))
	}
}

// TestCheckBoundsFollowTheChecker: WithBounds decodes within the
// checker's own bounds, larger or smaller than the defaults.
func TestCheckBoundsFollowTheChecker(t *testing.T) {
	rs, _ := config.ExampleRules()
	k, _ := limiter.NewKeyed()
	l, _ := local.New(config.NewStore(rs), k, fixedClock(t0), time.Minute)
	h := CheckHandler(l, 1<<20, nil, nil, WithBounds(config.LimitsConfig{MaxEntries: 2}))
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":"a"},{"key":"route","value":"b"},{"key":"x","value":"c"}]}]}`
	rec := post(t, h, body)
	var e httpjson.ErrorResponse
	if rec.Code != 400 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Field != "descriptors[0].entries" || e.Error != "descriptors[0].entries: more than 2 entries" {
		t.Fatalf("got %d %s, want 400: descriptors[0].entries: more than 2 entries", rec.Code, rec.Body)
	}
}

// FuzzCheckHandler feeds arbitrary bodies: the handler must answer 200,
// 400, 409 or 413 with a JSON body, never panic or 500. A body the decoder
// takes is within every bound, UTF-8 throughout, and survives a round
// trip: encoded again (encoding/json), it decodes to the same request.
func FuzzCheckHandler(f *testing.F) {
	f.Add(`{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hits":1}`)
	f.Add(`{"domain":"api","descriptors":[{"entries":[{"key":"login","value":"x"}]}],"hits":0,"request_id":"r"}`)
	f.Add(`{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":"a"},{"key":"route","value":"/export"}]}]}`)
	f.Add(`[1,2,3]`)
	// issue 19: case, duplicates, invalid UTF-8, lone surrogates, and the
	// huge-entries body at a small scale
	f.Add(`{"domain":"api","Domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"u"}]}]}`)
	f.Add(`{"domain":"api","domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"u"}]}]}`)
	f.Add("{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user_id\",\"value\":\"a\xffb\"}]}]}")
	f.Add(`{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"\ud800"}]}]}`)
	f.Add(`{"domain":"api","descriptors":[{"entries":[` + strings.Repeat(`{},`, 2000) + `{}]}]}`)
	f.Add(`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits":2}],"request_id":"r","payload":{"method":"PUT","path":"/x","headers":{"A":"1"},"body":"b"}}`)
	h := newHandler(f)
	schema := checkSchema(config.LimitsConfig{})
	b := config.DefaultLimits()
	f.Fuzz(func(t *testing.T, body string) {
		rec := post(t, h, body)
		switch rec.Code {
		case 200, 400, 413, 409: // 409: a request id an earlier input used
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer is not JSON: %q", rec.Body)
		}
		var in httpjson.CheckRequest
		req, derr := readCheck(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)), schema, 1<<20, &in)
		if derr != nil {
			if derr.Field == "" || derr.Status != 400 && derr.Status != 413 {
				t.Fatalf("refusal %#v: want a field and 400 or 413", derr)
			}
			return
		}
		if len(req.Descriptors) > b.MaxDescriptors || len(req.RequestID) > b.MaxRequestIDBytes || !utf8.ValidString(req.Domain) || !utf8.ValidString(req.RequestID) {
			t.Fatalf("accepted %+v", req)
		}
		for i, d := range req.Descriptors {
			if len(d.Entries) > b.MaxEntries {
				t.Fatalf("accepted %d entries", len(d.Entries))
			}
			for _, e := range d.Entries {
				if len(e.Key) > b.MaxKeyBytes || len(e.Value) > b.MaxValueBytes || !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
					t.Fatalf("accepted descriptor %d entry %q", i, e)
				}
			}
		}
		out, err := json.Marshal(&in)
		if err != nil {
			t.Fatal(err)
		}
		var again httpjson.CheckRequest
		req2, derr := readCheck(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(out)), schema, 1<<20, &again)
		if derr != nil || !reflect.DeepEqual(req, req2) || !reflect.DeepEqual(in, again) {
			t.Fatalf("round trip of %q through %s: %+v, %v", body, out, req2, derr)
		}
	})
}

// TestCheckRequestIDAndBounds: issue 10, items 2 and 5 on the HTTP API: a
// request id reused by a different request is 409 naming request_id; a
// value beyond the bounds is 400 naming the field.
func TestCheckRequestIDAndBounds(t *testing.T) {
	h := CheckHandler(func() *local.Engine {
		rs, _ := config.ExampleRules()
		k, _ := limiter.NewKeyed()
		l, _ := local.New(config.NewStore(rs), k, fixedClock(t0), time.Minute)
		return l
	}(), 1<<20, nil, nil)
	req := func(user string, hits int, id string) string {
		return `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"` + user + `"}]}],"hits":` +
			strconv.Itoa(hits) + `,"request_id":"` + id + `"}`
	}
	steps := []struct {
		body     string
		code     int
		contains string
	}{
		{req("priya", 1, "r1"), 200, `"remaining":99`},
		{req("priya", 1, "r1"), 200, `"remaining":99`}, // a retry: the same answer, not charged
		{req("priya", 1000000, "r1"), 409, `"field":"request_id"`},
		{req("mallory", 1, "r1"), 409, `request id already used by a different request`},
		{req(strings.Repeat("v", 600<<10), 1, "r2"), 400, `"field":"descriptors[0].entries[0].value"`},
		{req("priya", 1, strings.Repeat("i", 129)), 400, `"field":"request_id"`},
	}
	for i, s := range steps {
		rec := post(t, h, s.body)
		if rec.Code != s.code || !strings.Contains(rec.Body.String(), s.contains) {
			t.Fatalf("step %d: got %d %.300s, want %d containing %s", i, rec.Code, rec.Body, s.code, s.contains)
		}
	}
}
