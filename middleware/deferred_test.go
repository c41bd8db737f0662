package middleware

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/client"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/deferred"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
	"github.com/velvetrope/velvetrope/rls"
)

const deferRules = `domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://backend.test", max_payload_bytes: 2048}
`

// TestMiddlewareDefers: over a defer rule the middleware stores the
// request — method, path and query, headers without the hop-by-hop and
// sensitive ones, the body (base64 when binary) — and answers 202 with
// Location naming the ticket; the handler does not run. A body above
// MaxDeferBody or the rule's max_payload_bytes is 413; without a queue,
// and over a remote velvetrope (Envoy's API has no defer), 429.
func TestMiddlewareDefers(t *testing.T) {
	store := testrules.Store(t, deferRules)
	eng := testrules.Local(t, store, testrules.NewClock(), 0)
	bus, _ := events.NewMemBus(1, 100)
	q := deferred.NewQueue(bus, counters.NewMemStore(), nil, 0)
	ran := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran++ })
	mk := func(c ratelimit.Checker, q *deferred.Queue, maxBody int64) http.Handler {
		opts := Options{Domain: "web", Descriptors: [][]Source{{Header("X-User", "user")}}, MaxDeferBody: maxBody}
		if q != nil {
			opts.Queue = q
		}
		l, err := New(c, opts)
		if err != nil {
			t.Fatal(err)
		}
		return l.Handler(next)
	}
	h := mk(eng, q, 1024)
	send := func(h http.Handler, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/orders/7?express=1", strings.NewReader(body))
		r.Header.Set("X-User", "u1")
		r.Header.Set("Content-Type", "application/octet-stream")
		r.Header.Set("Authorization", "Bearer secret")
		r.Header.Set("Connection", "X-Hop")
		r.Header.Set("X-Hop", "1")
		r.Header.Add("X-Tag", "a")
		r.Header.Add("X-Tag", "b")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	if rec := send(h, "first"); rec.Code != 200 || ran != 1 {
		t.Fatalf("first: %d, handler ran %d", rec.Code, ran)
	}
	rec := send(h, "\x00\xffbinary")
	var out struct {
		Ticket       string `json:"ticket"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	if rec.Code != http.StatusAccepted || ran != 1 || !deferred.ValidTicket(out.Ticket) ||
		rec.Header().Get("Location") != "/v1/deferred/"+out.Ticket || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("deferred: %d %s %v (handler ran %d)", rec.Code, rec.Body, rec.Header(), ran)
	}
	m, err := bus.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	it, err := deferred.Decode(m.Value)
	if err != nil {
		t.Fatal(err)
	}
	p := it.Payload
	b, _ := base64.StdEncoding.DecodeString(p.BodyBase64)
	if p.Method != "POST" || p.Path != "/orders/7?express=1" || string(b) != "\x00\xffbinary" || p.Body != "" ||
		p.Headers["Content-Type"] != "application/octet-stream" || p.Headers["X-Tag"] != "a, b" || p.Headers["X-User"] != "u1" {
		t.Fatalf("payload %+v", p)
	}
	for _, k := range []string{"Authorization", "Connection", "X-Hop"} {
		if _, ok := p.Headers[k]; ok {
			t.Fatalf("payload kept %s: %+v", k, p.Headers)
		}
	}
	if rec := send(h, strings.Repeat("x", 1025)); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over MaxDeferBody: %d", rec.Code)
	}
	if rec := send(mk(eng, q, 4096), strings.Repeat("x", 3000)); rec.Code != http.StatusRequestEntityTooLarge ||
		!strings.Contains(rec.Body.String(), "max_payload_bytes") {
		t.Fatalf("body over max_payload_bytes: %d %s", rec.Code, rec.Body)
	}
	// a path that would leave the target's base path cannot be deferred
	esc := httptest.NewRequest("POST", "/orders/%2e%2e/admin", strings.NewReader("x"))
	esc.Header.Set("X-User", "u1")
	erec := httptest.NewRecorder()
	h.ServeHTTP(erec, esc)
	if erec.Code != http.StatusBadRequest || !strings.Contains(erec.Body.String(), "payload.path") || ran != 1 {
		t.Fatalf("a path with a dot segment: %d %s, want 400 naming payload.path", erec.Code, erec.Body)
	}
	if rec := send(mk(eng, nil, 0), "x"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("no queue: %d", rec.Code)
	}
	// over Envoy's gRPC API a defer is OVER_LIMIT: 429
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := rls.NewGRPCServer(rls.New(eng, rls.Options{}))
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	gc, err := client.DialGRPC(lis.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if rec := send(mk(NewRemote(gc), q, 0), "x"); rec.Code != http.StatusTooManyRequests || ran != 1 {
		t.Fatalf("remote: %d", rec.Code)
	}
}

// TestMiddlewareDefersOnlyUnderADeferringRule: issue 19, item 4. Over
// the async checker, an elastic rule whose pool was spent answered 202
// Accepted with a ticket no rule would release. Only a rule that defers
// gets 202; an elastic rule refused by its pool, or over its ceiling, is
// 429 and nothing is queued.
func TestMiddlewareDefersOnlyUnderADeferringRule(t *testing.T) {
	store := testrules.Store(t, `domain: web
pools:
  - name: tiny
    rate_limit: {unit: hour, requests_per_unit: 1}
descriptors:
  - key: tenant
    algorithm: fixed_window
    throttle: {type: elastic, pool: tiny, max_multiplier: 2}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: user
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://backend.test"}
    rate_limit: {unit: hour, requests_per_unit: 1}
`)
	ms := counters.NewMemStore()
	deltas, _ := events.NewMemBus(1, 1<<16)
	c, err := checker.New(checker.Config{}, store, ms, deltas, limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	topic, _ := events.NewMemBus(1, 100)
	q := deferred.NewQueue(topic, ms, nil, 0)
	steps := []struct {
		header, value string
		want          int
	}{
		{"X-Tenant", "spender", 200}, // its own limit
		{"X-Tenant", "spender", 200}, // the pool's one
		{"X-Tenant", "spender", 429}, // over its ceiling
		{"X-Tenant", "victim", 200},  // its own limit
		{"X-Tenant", "victim", 429},  // the pool is spent: refused, not deferred
		{"X-User", "u", 200},
		{"X-User", "u", http.StatusAccepted}, // a rule that defers
	}
	for i, s := range steps {
		l, err := New(c, Options{Domain: "web", Queue: q,
			Descriptors: [][]Source{{Header("X-Tenant", "tenant")}, {Header("X-User", "user")}}})
		if err != nil {
			t.Fatal(err)
		}
		h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := httptest.NewRequest("POST", "/work", strings.NewReader("x"))
		r.Header.Set(s.header, s.value)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != s.want {
			t.Fatalf("step %d (%s=%s): %d %s, want %d", i, s.header, s.value, rec.Code, rec.Body, s.want)
		}
	}
	if n := topic.Pending(); n != 1 {
		t.Fatalf("%d items queued, want the one deferred", n)
	}
}
