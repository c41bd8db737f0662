package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/deferred"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
)

const deferRules = `
domain: shop
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 10}
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 2}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://orders.test", max_payload_bytes: 100}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1}
    algorithm: fixed_window
    throttle: {type: elastic, pool: shared, max_multiplier: 3}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 2}
    algorithm: fixed_window
    throttle: {type: soft, overage_percent: 50}
`

type brokenTopic struct{}

func (brokenTopic) Publish(context.Context, []events.Message) error { return errors.New("broker down") }
func (brokenTopic) Close(context.Context) error                     { return nil }

func deferHandler(t *testing.T, pub events.Publisher, withQueue bool) (http.Handler, *counters.MemStore) {
	t.Helper()
	f, err := config.ParseRules("rules.yaml", []byte(deferRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := limiter.NewKeyed(limiter.WithClock(fixedClock(t0)))
	l, err := local.New(config.NewStore(rs), k, fixedClock(t0), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ms := counters.NewMemStore()
	var opts []Option
	if withQueue {
		opts = append(opts, WithQueue(deferred.NewQueue(pub, ms, func() time.Time { return time.Unix(0, t0) }, 0)))
	}
	return CheckHandler(l, 1<<20, nil, nil, opts...), ms
}

func decodeCheck(t *testing.T, rec *httptest.ResponseRecorder) httpjson.CheckResponse {
	t.Helper()
	var out httpjson.CheckResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	return out
}

// TestCheckDefers: over a defer rule the answer is defer with a ticket
// whose state reads queued, the item is on the topic with its payload; a
// payload over max_payload_bytes is 413 naming the field; with a topic
// that refuses, or no queue, the request is refused with defer_error.
func TestCheckDefers(t *testing.T) {
	bus, _ := events.NewMemBus(2, 100)
	h, ms := deferHandler(t, bus, true)
	body := `{"domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"a"}]}],"payload":{"method":"POST","path":"/orders","headers":{"Content-Type":"application/json"},"body":"{}"}}`
	for range 2 {
		if out := decodeCheck(t, post(t, h, body)); out.Decision != "allow" {
			t.Fatalf("within the limit: %+v", out)
		}
	}
	rec := post(t, h, body)
	out := decodeCheck(t, rec)
	if rec.Code != 200 || out.Decision != "defer" || !deferred.ValidTicket(out.Ticket) || out.RetryAfterMS < 1 ||
		out.Statuses[0].Decision != "defer" || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("over the limit: %d %+v %v", rec.Code, out, rec.Header())
	}
	m, err := bus.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	it, err := deferred.Decode(m.Value)
	if err != nil || it.Ticket != out.Ticket || it.Payload == nil || it.Payload.Path != "/orders" || it.Rule != "shop:user_id" {
		t.Fatalf("item %+v %v", it, err)
	}
	// the ticket's state
	th := TicketHandler(ms)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/deferred/{ticket}", th)
	for _, tc := range []struct {
		path  string
		code  int
		state string
	}{
		{"/v1/deferred/" + out.Ticket, 200, "queued"},
		{"/v1/deferred/AAAAAAAAAAAAAAAAAAAAAA", 404, ""},
		{"/v1/deferred/not-a-ticket", 400, ""},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		var tj httpjson.Ticket
		_ = json.Unmarshal(rec.Body.Bytes(), &tj)
		if rec.Code != tc.code || tj.State != tc.state || (tc.code == 200 && (tj.EnqueuedAt == nil || tj.Ticket != out.Ticket)) {
			t.Fatalf("%s: %d %s", tc.path, rec.Code, rec.Body)
		}
	}
	// a payload over the rule's max_payload_bytes (100)
	big := `{"domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"a"}]}],"payload":{"body":"` + strings.Repeat("x", 200) + `"}}`
	rec = post(t, h, big)
	var e httpjson.ErrorResponse
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	if rec.Code != http.StatusRequestEntityTooLarge || e.Field != "payload" || !strings.Contains(e.Error, "max_payload_bytes 100") {
		t.Fatalf("large payload: %d %s", rec.Code, rec.Body)
	}
	bad := `{"domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"a"}]}],"payload":{"path":"x"}}`
	if rec := post(t, h, bad); rec.Code != 400 || !strings.Contains(rec.Body.String(), `"field":"payload.path"`) {
		t.Fatalf("bad path: %d %s", rec.Code, rec.Body)
	}
	for name, h := range map[string]http.Handler{
		"topic down": func() http.Handler { h, _ := deferHandler(t, brokenTopic{}, true); return h }(),
		"no queue":   func() http.Handler { h, _ := deferHandler(t, nil, false); return h }(),
	} {
		for range 2 {
			post(t, h, body)
		}
		rec := post(t, h, body)
		out := decodeCheck(t, rec)
		if out.Decision != "deny" || out.Ticket != "" || out.DeferError == "" || out.Statuses[0].Decision != "deny" ||
			rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("%s: %+v", name, out)
		}
	}
}

// TestCheckElasticAndSoftHeaders: an elastic admission over the rule's
// own limit says so in its status and in RateLimit-Elastic; a soft one
// in over_soft and RateLimit-Over-Soft; within the limits neither header
// is there.
func TestCheckElasticAndSoftHeaders(t *testing.T) {
	h, _ := deferHandler(t, nil, false)
	for _, tc := range []struct {
		key, header string
		answers     []string // per request: "" plain allow, "flag" allowed with the flag, "deny"
	}{
		{"tenant", "RateLimit-Elastic", []string{"", "flag", "flag", "deny"}},
		{"plan", "RateLimit-Over-Soft", []string{"", "", "flag", "deny"}},
	} {
		for i, want := range tc.answers {
			rec := post(t, h, `{"domain":"shop","descriptors":[{"entries":[{"key":"`+tc.key+`","value":"x"}]}]}`)
			out := decodeCheck(t, rec)
			st := out.Statuses[0]
			flag := st.Elastic || st.OverSoft
			hdr := rec.Header().Get(tc.header)
			switch want {
			case "":
				if out.Decision != "allow" || flag || hdr != "" {
					t.Fatalf("%s %d: %+v %q", tc.key, i, out, hdr)
				}
			case "flag":
				if out.Decision != "allow" || !flag || hdr != `"shop:`+tc.key+`"` {
					t.Fatalf("%s %d: %+v %q", tc.key, i, out, hdr)
				}
			case "deny":
				if out.Decision != "deny" || hdr != "" {
					t.Fatalf("%s %d: %+v %q", tc.key, i, out, hdr)
				}
			}
		}
	}
}

// TestCheckDeferOnceAndBounded: issue 19, items 5 and 7, at the API. A
// retried deferred request (the same request_id) answers its first
// ticket; the id on another request is 409 naming request_id; past the
// rule's defer.max_queued the request is refused, deny with a
// defer_error naming the bound.
func TestCheckDeferOnceAndBounded(t *testing.T) {
	bus, _ := events.NewMemBus(2, 100)
	h, _ := deferHandler(t, bus, true)
	body := func(user, id string) string {
		return `{"domain":"shop","request_id":"` + id + `","descriptors":[{"entries":[{"key":"user_id","value":"` + user + `"}]}]}`
	}
	for range 2 {
		post(t, h, body("a", ""))
	}
	first := decodeCheck(t, post(t, h, body("a", "r-1")))
	if first.Decision != "defer" || first.Ticket == "" {
		t.Fatalf("first: %+v", first)
	}
	for i := range 2 {
		if out := decodeCheck(t, post(t, h, body("a", "r-1"))); out.Decision != "defer" || out.Ticket != first.Ticket {
			t.Fatalf("retry %d: %+v, want ticket %s", i, out, first.Ticket)
		}
	}
	if n := bus.Pending(); n != 1 {
		t.Fatalf("%d items on the topic, want 1", n)
	}
	for range 2 {
		post(t, h, body("b", ""))
	}
	rec := post(t, h, body("b", "r-1"))
	var e httpjson.ErrorResponse
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	if rec.Code != http.StatusConflict || e.Field != "request_id" {
		t.Fatalf("another request under the id: %d %s, want 409 naming request_id", rec.Code, rec.Body)
	}
	// max_queued: the rule's default is what 2/second releases in 10
	// minutes (1,200); a rule with max_queued 1 shows the refusal
	f, err := config.ParseRules("rules.yaml", []byte(`domain: shop
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 1}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://orders.test", max_queued: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := config.Compile([]*config.File{f})
	k, _ := limiter.NewKeyed(limiter.WithClock(fixedClock(t0)))
	l, _ := local.New(config.NewStore(rs), k, fixedClock(t0), time.Minute)
	ms := counters.NewMemStore()
	ms.SetClock(fixedClock(t0)) // the queue's clock: deadlines are not past
	q := deferred.NewQueue(bus, ms, func() time.Time { return time.Unix(0, t0) }, 0)
	hq := CheckHandler(l, 1<<20, nil, nil, WithQueue(q))
	var got []string
	for range 3 {
		out := decodeCheck(t, post(t, hq, body("c", "")))
		got = append(got, out.Decision+" "+out.DeferError)
	}
	if got[0] != "allow " || got[1] != "defer " || !strings.HasPrefix(got[2], "deny ") || !strings.Contains(got[2], "defer.max_queued is 1") {
		t.Fatalf("decisions %q, want allow, defer, then deny naming defer.max_queued", got)
	}
}
