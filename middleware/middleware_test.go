package middleware

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/client"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/local"
	"github.com/velvetrope/velvetrope/ratelimit"
	"github.com/velvetrope/velvetrope/rls"
)

const rules = `domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user_id
    descriptors:
      - key: route
        algorithm: fixed_window
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func exactEngine(t *testing.T) *local.Engine {
	t.Helper()
	return testrules.Local(t, testrules.Store(t, rules), testrules.NewClock(), 0)
}

// remote serves an exact checker as Envoy's rate limit service on
// loopback and returns a Remote of it.
func remote(t *testing.T) *Remote {
	t.Helper()
	return remoteOf(t, exactEngine(t))
}

// remoteOf serves e as Envoy's rate limit service on loopback and
// returns a Remote of it.
func remoteOf(t *testing.T, e rls.Checker) *Remote {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := rls.NewGRPCServer(rls.New(e, rls.Options{}))
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	gc, err := client.DialGRPC(lis.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gc.Close() })
	return NewRemote(gc)
}

type userKey struct{}

func userOf(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func handler(t *testing.T, c ratelimit.Checker, opts Options) http.Handler {
	t.Helper()
	if opts.Domain == "" {
		opts.Domain = "web"
	}
	opts.Logger = quiet
	l, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("GET /export/{id}", l.Handler(ok))
	mux.Handle("GET /", l.Handler(ok))
	return mux
}

type hit struct {
	peer, path, user string
	headers          map[string]string
}

func do(h http.Handler, c hit) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "http://svc"+c.path, nil)
	r.RemoteAddr = c.peer
	for k, v := range c.headers {
		r.Header.Set(k, v)
	}
	if c.user != "" {
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, c.user))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func TestHeadersAnd429(t *testing.T) {
	h := handler(t, exactEngine(t), Options{Descriptors: [][]Source{{ClientIP()}}})
	for i := range 5 {
		rec := do(h, hit{peer: "203.0.113.9:5000", path: "/"})
		if rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != string(rune('4'-i)) ||
			rec.Header().Get("X-RateLimit-Limit") != "5" || rec.Header().Get("RateLimit-Policy") != `"web:remote_address";q=5;w=60` {
			t.Fatalf("call %d: %d %v", i, rec.Code, rec.Header())
		}
	}
	rec := do(h, hit{peer: "203.0.113.9:5000", path: "/"})
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "60" || rec.Header().Get("RateLimit") != `"web:remote_address";r=0;t=60` {
		t.Fatalf("over the limit: %d %v", rec.Code, rec.Header())
	}
}

func TestTrustedProxies(t *testing.T) {
	proxy := netip.MustParsePrefix("10.0.0.0/8")
	cases := []struct {
		name    string
		peer    string
		headers map[string]string
		want    string
	}{
		{"direct client", "198.51.100.1:1", nil, "198.51.100.1"},
		{"spoofed XFF from an untrusted peer is ignored", "198.51.100.1:1", map[string]string{"X-Forwarded-For": "1.1.1.1"}, "198.51.100.1"},
		{"XFF through a trusted proxy", "10.0.0.2:1", map[string]string{"X-Forwarded-For": "1.1.1.1, 198.51.100.7"}, "198.51.100.7"},
		{"XFF through two trusted proxies", "10.0.0.2:1", map[string]string{"X-Forwarded-For": "198.51.100.7, 10.9.9.9"}, "198.51.100.7"},
		{"a client-forged left part is not believed", "10.0.0.2:1", map[string]string{"X-Forwarded-For": "6.6.6.6, 198.51.100.8"}, "198.51.100.8"},
		{"Forwarded wins over XFF", "10.0.0.2:1", map[string]string{"Forwarded": `for="[2001:db8::1]:443";proto=https`, "X-Forwarded-For": "1.1.1.1"}, "2001:db8::1"},
		{"malformed hop stops the walk", "10.0.0.2:1", map[string]string{"X-Forwarded-For": "1.1.1.1, garbage"}, "10.0.0.2"},
		{"only proxies", "10.0.0.2:1", map[string]string{"X-Forwarded-For": "10.1.1.1"}, "10.1.1.1"},
		{"IPv4-mapped peer", "[::ffff:198.51.100.3]:1", nil, "198.51.100.3"},
	}
	src := ClientIPPrefix(128, proxy) // full addresses: what the walk found
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = c.peer
			for k, v := range c.headers {
				r.Header.Set(k, v)
			}
			k, v, ok := src(r)
			if !ok || k != "remote_address" || v != c.want {
				t.Fatalf("got %s=%s %v, want remote_address=%s", k, v, ok, c.want)
			}
		})
	}
}

// TestHierarchicalDeny: the per-IP limit has room, the per-user-per-route
// one does not: one call, denied; the route pattern, not the path, counts.
func TestHierarchicalDeny(t *testing.T) {
	h := handler(t, exactEngine(t), Options{Descriptors: [][]Source{{ClientIP()}, {User(userOf), Route(nil)}}})
	for i, path := range []string{"/export/1", "/export/2"} {
		if rec := do(h, hit{peer: "198.51.100.1:1", path: path, user: "priya"}); rec.Code != 200 {
			t.Fatalf("call %d: %d", i, rec.Code)
		}
	}
	rec := do(h, hit{peer: "198.51.100.1:1", path: "/export/3", user: "priya"})
	if rec.Code != 429 || rec.Header().Get("X-RateLimit-Limit") != "2" {
		t.Fatalf("third export: %d %v", rec.Code, rec.Header())
	}
	// another user on the same IP still passes (the IP has 5, used 3)
	if rec := do(h, hit{peer: "198.51.100.1:1", path: "/export/1", user: "arjun"}); rec.Code != 200 {
		t.Fatalf("other user: %d", rec.Code)
	}
	// without a user the user descriptor is left out: only the IP counts
	if rec := do(h, hit{peer: "198.51.100.1:1", path: "/export/1"}); rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("anonymous: %d %v", rec.Code, rec.Header())
	}
}

func TestCostPerRoute(t *testing.T) {
	h := handler(t, exactEngine(t), Options{Descriptors: [][]Source{{ClientIP()}},
		Cost: func(r *http.Request) int64 {
			if strings.HasPrefix(r.URL.Path, "/export/") {
				return 3
			}
			return 1
		}})
	if rec := do(h, hit{peer: "198.51.100.1:1", path: "/export/1"}); rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("export: %d %v", rec.Code, rec.Header())
	}
	if rec := do(h, hit{peer: "198.51.100.1:1", path: "/export/1"}); rec.Code != 429 {
		t.Fatalf("second export: %d", rec.Code)
	}
}

func TestAPIKeyIsHashed(t *testing.T) {
	src := APIKey("X-API-Key", []byte("secret"))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", "sk_live_123")
	k, v, ok := src(r)
	if !ok || k != "api_key" || len(v) != 32 || strings.Contains(v, "sk_live") {
		t.Fatalf("got %s=%s %v", k, v, ok)
	}
	if _, v2, _ := APIKey("X-API-Key", []byte("other"))(r); v2 == v {
		t.Fatal("the hash does not depend on the secret")
	}
	h := handler(t, exactEngine(t), Options{Descriptors: [][]Source{{APIKey("X-API-Key", []byte("secret"))}}})
	key := map[string]string{"X-API-Key": "sk_live_123"}
	if rec := do(h, hit{peer: "198.51.100.1:1", path: "/", headers: key}); rec.Code != 200 {
		t.Fatalf("first: %d", rec.Code)
	}
	if rec := do(h, hit{peer: "198.51.100.1:1", path: "/", headers: key}); rec.Code != 429 {
		t.Fatalf("second: %d", rec.Code)
	}
	// no key: no descriptor, no limit
	if rec := do(h, hit{peer: "198.51.100.1:1", path: "/"}); rec.Code != 200 || rec.Header().Get("X-RateLimit-Limit") != "" {
		t.Fatalf("no key: %d %v", rec.Code, rec.Header())
	}
}

func TestRemoteAndFailurePolicy(t *testing.T) {
	h := handler(t, remote(t), Options{Descriptors: [][]Source{{ClientIP()}}})
	for i := range 5 {
		if rec := do(h, hit{peer: "198.51.100.1:1", path: "/"}); rec.Code != 200 || rec.Header().Get("X-RateLimit-Limit") != "5" {
			t.Fatalf("remote call %d: %d %v", i, rec.Code, rec.Header())
		}
	}
	if rec := do(h, hit{peer: "198.51.100.1:1", path: "/"}); rec.Code != 429 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("remote over the limit: %d %v", rec.Code, rec.Header())
	}

	// a service that accepts connections and never answers
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	dc, err := client.DialGRPC(dead.Addr().String(), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	for _, open := range []bool{true, false} {
		l, _ := New(NewRemote(dc), Options{Domain: "web", Descriptors: [][]Source{{ClientIP()}}, FailOpen: open, Logger: quiet})
		mux := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		rec := do(mux, hit{peer: "198.51.100.1:1", path: "/"})
		want := map[bool]int{true: 200, false: 503}[open]
		if rec.Code != want || l.Failures.Load() != 1 {
			t.Fatalf("fail open=%v: %d, failures %d", open, rec.Code, l.Failures.Load())
		}
	}

	// issue 10, item 10: failing open keeps a budget per key instead of
	// letting everything through (3 per hour here, so timing cannot matter)
	l, err := New(NewRemote(dc), Options{Domain: "web", Descriptors: [][]Source{{ClientIP()}}, FailOpen: true, Logger: quiet,
		Emergency: Emergency{Limit: 3, Per: time.Hour, Burst: 3}})
	if err != nil {
		t.Fatal(err)
	}
	mux := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	steps := []struct {
		peer string
		want int
	}{{"198.51.100.1:1", 200}, {"198.51.100.1:1", 200}, {"198.51.100.1:1", 200}, {"198.51.100.1:1", 429},
		{"198.51.100.2:1", 200}, {"198.51.100.1:1", 429}}
	for i, st := range steps {
		rec := do(mux, hit{peer: st.peer, path: "/"})
		if rec.Code != st.want || (st.want == 429 && rec.Header().Get("Retry-After") == "") {
			t.Fatalf("emergency step %d (%s): got %d, want %d", i, st.peer, rec.Code, st.want)
		}
	}
	if l.EmergencyDenied.Load() != 2 || l.Failures.Load() != int64(len(steps)) {
		t.Fatalf("emergency denied %d (want 2), failures %d", l.EmergencyDenied.Load(), l.Failures.Load())
	}
}

// TestSourcesBeyondBounds: issue 10, item 5 on the middleware. A header
// value beyond the bounds is answered 400 naming the attribute and never
// reaches the checker (before, it made an oversized delta).
func TestSourcesBeyondBounds(t *testing.T) {
	h := handler(t, exactEngine(t), Options{Descriptors: [][]Source{{Header("X-Tenant", "tenant")}}})
	cases := []struct {
		value, want string
		code        int
	}{
		{strings.Repeat("t", 1024), "", 200},
		{strings.Repeat("t", 1025), `request attribute "tenant": bad request: longer than 1024 bytes`, 400},
		{"caf\xe9", `request attribute "tenant": bad request: not valid UTF-8`, 400},
	}
	for i, c := range cases {
		rec := do(h, hit{peer: "198.51.100.1:1", path: "/", headers: map[string]string{"X-Tenant": c.value}})
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Fatalf("step %d: got %d %q, want %d containing %q", i, rec.Code, rec.Body, c.code, c.want)
		}
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"no domain":      {Descriptors: [][]Source{{Method()}}},
		"no descriptors": {Domain: "web"},
		"empty":          {Domain: "web", Descriptors: [][]Source{{}}},
	} {
		if _, err := New(exactEngine(t), o); err == nil || !strings.Contains(err.Error(), "Options.") {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestPerRequestAllocations: beyond the response headers' strings, a
// request costs the middleware a bounded handful of allocations (the
// client address string, the handler's closure state; -race adds a few),
// not memory per descriptor or per entry: the call is pooled.
func TestPerRequestAllocations(t *testing.T) {
	c := exactEngine(t)
	l, _ := New(c, Options{Domain: "web", Descriptors: [][]Source{{ClientIP()}, {Header("X-Tenant", "tenant"), Method()}}, Logger: quiet})
	h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "198.51.100.1:1"
	r.Header.Set("X-Tenant", "acme")
	w := &discard{h: http.Header{}}
	total := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, r) })

	var d ratelimit.Decision
	req := &ratelimit.Request{Domain: "web", Hits: 1, Descriptors: []ratelimit.Descriptor{
		{Entries: []config.Entry{{Key: "remote_address", Value: "198.51.100.1"}}},
		{Entries: []config.Entry{{Key: "tenant", Value: "acme"}, {Key: "method", Value: "GET"}}}}}
	if err := c.Check(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{}
	headers := testing.AllocsPerRun(200, func() { clear(hdr); ratelimit.SetHeaders(hdr, &d) })
	if total > headers+6 {
		t.Fatalf("%.0f allocations per request, %.0f of them the headers", total, headers)
	}
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// FuzzClientIP: any peer and forwarding headers give either no address
// (an unparsable peer) or a valid one without a zone, and an untrusted
// peer is always the client whatever the headers claim.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.2:1", "1.1.1.1, 198.51.100.7", "")
	f.Add("10.0.0.2:1", "", `for="[2001:db8::1]:443";proto=https, for=unknown`)
	f.Add("198.51.100.1:1", "1.1.1.1", "for=2.2.2.2")
	f.Add("garbage", "x", "for=")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	src := ClientIPPrefix(128, trusted...)
	agg := ClientIP(trusted...)
	f.Fuzz(func(t *testing.T, peer, xff, fwd string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if fwd != "" {
			r.Header.Set("Forwarded", fwd)
		}
		k, v, ok := src(r)
		p, good := parseAddr(peer)
		if !ok {
			if good {
				t.Fatalf("valid peer %q gave no address", peer)
			}
			return
		}
		ip, err := netip.ParseAddr(v)
		if k != "remote_address" || err != nil || ip.Zone() != "" {
			t.Fatalf("got %s=%q (%v)", k, v, err)
		}
		if !isTrusted(p, trusted) && ip != p {
			t.Fatalf("untrusted peer %q, headers %q / %q: client %s, want the peer", peer, xff, fwd, ip)
		}
		// the default source: IPv4 as is, IPv6 as the /64 holding it
		_, av, _ := agg(r)
		if ip.Is4() && av != ip.String() {
			t.Fatalf("IPv4 client %s keyed as %q", ip, av)
		}
		if ip.Is6() {
			pfx, err := netip.ParsePrefix(av)
			if err != nil || pfx.Bits() != 64 || !pfx.Contains(ip) || pfx != pfx.Masked() {
				t.Fatalf("IPv6 client %s keyed as %q, want its /64", ip, av)
			}
		}
	})
}

// TestIPv6KeyedByPrefix: issue 10, item 10. Before, every address of a
// /64 was its own key, so one subscriber rotated through 2^64 budgets.
func TestIPv6KeyedByPrefix(t *testing.T) {
	h := handler(t, exactEngine(t), Options{Descriptors: [][]Source{{ClientIP()}}})
	for i := range 5 { // five addresses of one /64 share the limit of 5
		if rec := do(h, hit{peer: fmt.Sprintf("[2001:db8:1:2::%x]:1", i+1), path: "/"}); rec.Code != 200 {
			t.Fatalf("call %d: %d", i, rec.Code)
		}
	}
	if rec := do(h, hit{peer: "[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", path: "/"}); rec.Code != 429 {
		t.Fatalf("another address of the same /64: %d, want 429", rec.Code)
	}
	if rec := do(h, hit{peer: "[2001:db8:1:3::1]:1", path: "/"}); rec.Code != 200 {
		t.Fatalf("the next /64: %d, want 200", rec.Code)
	}
	cases := []struct {
		bits       int
		peer, want string
	}{
		{64, "[2001:db8:1:2:3:4:5:6]:1", "2001:db8:1:2::/64"},
		{48, "[2001:db8:1:2:3:4:5:6]:1", "2001:db8:1::/48"},
		{128, "[2001:db8:1:2:3:4:5:6]:1", "2001:db8:1:2:3:4:5:6"},
		{56, "198.51.100.7:1", "198.51.100.7"},
		{0, "[2001:db8::1]:1", "2001:db8::/64"}, // out of range: the default
	}
	for i, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.peer
		if _, v, _ := ClientIPPrefix(c.bits)(r); v != c.want {
			t.Fatalf("step %d: /%d of %s = %q, want %q", i, c.bits, c.peer, v, c.want)
		}
	}
}

// TestRemoteHits: request hits, per-descriptor hits and probes (0) reach
// the remote service as they would an in-process checker.
func TestRemoteHits(t *testing.T) {
	rm := remote(t)
	ip := func(hits int64, own int64) *ratelimit.Request {
		d := ratelimit.Descriptor{Entries: []config.Entry{{Key: "remote_address", Value: "192.0.2.1"}}}
		if own >= 0 {
			d.Hits, d.HasHits = own, true
		}
		return &ratelimit.Request{Domain: "web", Hits: hits, Descriptors: []ratelimit.Descriptor{d}}
	}
	steps := []struct {
		req       *ratelimit.Request
		remaining int64
	}{{ip(2, -1), 3}, {ip(1, 0), 3}, {ip(0, -1), 3}, {ip(1, 2), 1}}
	for i, s := range steps {
		var d ratelimit.Decision
		if err := rm.Check(context.Background(), s.req, &d); err != nil || d.Statuses[0].Remaining != s.remaining {
			t.Fatalf("step %d: %v remaining %d, want %d", i, err, d.Statuses[0].Remaining, s.remaining)
		}
	}
}
