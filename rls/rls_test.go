package rls

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/strictjson"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

func newTestServer(t *testing.T, opts Options) *Server {
	t.Helper()
	clk := testrules.NewClock()
	return New(engines[0].make(t, loadEnvoyRules(t), clk), opts)
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestMalformedRequestsAreInvalidArgument(t *testing.T) {
	client := dial(t, newTestServer(t, Options{}))
	many := make([]*ratelimitv3.RateLimitDescriptor, 33)
	for i := range many {
		many[i] = desc("foo", "a")
	}
	wide := desc()
	for range 17 {
		wide.Entries = append(wide.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	cases := []struct {
		name  string
		req   *rlsv3.RateLimitRequest
		field string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a")}}, "domain"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "rl"}, "descriptors"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: many}, "descriptors"},
		{"empty entries", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a"), {}}}, "descriptors[1].entries"},
		{"too many entries", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{wide}}, "descriptors[0].entries"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("", "a")}}, "descriptors[0].entries[0].key"},
		{"huge descriptor hits", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: desc("foo", "a").Entries, HitsAddend: wrapperspb.UInt64(1 << 40)}}}, "descriptors[0].hits_addend"},
		{"negative hits on some descriptors only", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("foo", "a"), {Entries: desc("foo", "b").Entries, HitsAddend: wrapperspb.UInt64(1), IsNegativeHits: true}}}, "descriptors[1].is_negative_hits"},
		{"override without a unit", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: desc("foo", "a").Entries, Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3}}}},
			"descriptors[0].limit.unit"},
		{"override with a huge unit multiplier", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: desc("foo", "a").Entries, Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3,
				Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(1 << 30)}}}},
			"descriptors[0].limit.unit_multiplier"},
		// issue 10, item 5: the bounds (16 descriptors, 8 entries, 128-byte
		// keys, 1,024-byte values by default)
		{"17 descriptors", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: many[:17]}, "descriptors"},
		{"9 entries", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: wide.Entries[:9]}}}, "descriptors[0].entries"},
		{"a 600 KB value", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("foo", "a"), desc("foo", strings.Repeat("v", 600<<10))}}, "descriptors[1].entries[0].value"},
		{"a long key with an override", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: desc(strings.Repeat("k", 129), "a").Entries, Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_SECOND}}}}, "descriptors[0].entries[0].key"},
		// an unknown domain is still checked for shape
		{"unknown domain, empty key", &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("", "a")}}, "descriptors[0].entries[0].key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := client.ShouldRateLimit(context.Background(), c.req)
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), c.field+":") {
				t.Fatalf("got %v, want InvalidArgument naming %s", err, c.field)
			}
		})
	}
	// invalid UTF-8 never reaches the handler: protobuf refuses it in
	// proto3 strings, and the server keeps answering
	if _, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl\xff",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a")}}); err == nil {
		t.Fatal("invalid UTF-8 domain accepted")
	}
	resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after bad requests: %v %v", resp, err)
	}
}

func TestStatsCountOutcomes(t *testing.T) {
	s := newTestServer(t, Options{})
	ctx := context.Background()
	ok := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "s")}}
	for range 3 { // limit 2 a minute: OK, OK, OVER_LIMIT
		if _, err := s.ShouldRateLimit(ctx, ok); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl"})
	_, _ = s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: ok.Descriptors})
	got := [4]uint64{s.Stats.OK.Load(), s.Stats.OverLimit.Load(), s.Stats.Invalid.Load(), s.Stats.Errors.Load()}
	if got != [4]uint64{3, 1, 1, 0} {
		t.Fatalf("ok, over, invalid, errors = %v, want [3 1 1 0]", got)
	}
}

func TestResponseHeaders(t *testing.T) {
	for _, on := range []bool{false, true} {
		s := newTestServer(t, Options{ResponseHeaders: on})
		// the limit is 2 a minute: 2 hits pass, the third is refused and
		// can retry when the window rolls
		req := &rlsv3.RateLimitRequest{Domain: "rl", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "h")}}
		if _, err := s.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		req.HitsAddend = 1
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if !on {
			if len(got) != 0 {
				t.Fatalf("headers when disabled: %v", got)
			}
			continue
		}
		want := map[string]string{"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "60",
			"Ratelimit": `"rl:foo";r=0;t=60`, "Ratelimit-Policy": `"rl:foo";q=2;w=60`, "Retry-After": "60"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
			}
		}
	}
}

func TestJSONEndpoint(t *testing.T) {
	h := JSONHandler(newTestServer(t, Options{}), 1<<10)
	post := func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		return rec
	}
	cases := []struct {
		name, body string
		code       int
		contains   string
	}{
		{"allowed", `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`, 200, `"overallCode":"OK"`},
		{"denied", `{"domain":"rl","hitsAddend":5,"descriptors":[{"entries":[{"key":"foo","value":"k"}]}]}`, 429, `"overallCode":"OVER_LIMIT"`},
		{"unknown domain", `{"domain":"nope","descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`, 200, `"overallCode":"OK"`},
		{"snake_case names", `{"domain":"rl","hits_addend":1,"descriptors":[{"entries":[{"key":"foo","value":"l"}]}]}`, 200, `"limitRemaining":1`},
		{"empty domain", `{"descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`, 400, "domain: must not be empty"},
		{"unknown field", `{"domain":"rl","descriptorz":[]}`, 400, "descriptorz"},
		{"not json", `{`, 400, "invalid RateLimitRequest JSON"},
		{"negative hits", `{"domain":"rl","hitsAddend":-1,"descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`, 400, "invalid RateLimitRequest JSON"},
		{"too big", `{"domain":"` + strings.Repeat("x", 2000) + `"}`, 413, "above the limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := post(c.body)
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.contains) {
				t.Fatalf("got %d %s, want %d containing %q", rec.Code, rec.Body, c.code, c.contains)
			}
		})
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/json", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" {
		t.Fatalf("GET /json: %d", rec.Code)
	}
}

// FuzzJSONHandler: any body gets 200, 429, 400 or 413, never a panic or
// a 500; a body the strict decoder takes is within the bounds, and the
// message it decodes to encodes (protojson) to a body that decodes to the
// same message.
func FuzzJSONHandler(f *testing.F) {
	f.Add([]byte(`{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`))
	f.Add([]byte(`{"domain":"rl","hitsAddend":4294967295,"descriptors":[{"entries":[{"key":"foo"}],"hitsAddend":"18446744073709551615"}]}`))
	f.Add([]byte(`{"domain":"nope","descriptors":[{}]}`))
	// issue 19: case, duplicates (under one name and under both), invalid
	// UTF-8, lone surrogates, and the huge-entries body at a small scale
	f.Add([]byte(`{"domain":"rl","Domain":"shop","descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`))
	f.Add([]byte(`{"domain":"rl","domain":"shop","descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`))
	f.Add([]byte(`{"domain":"rl","hitsAddend":1,"hits_addend":2,"descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`))
	f.Add([]byte("{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[{\"key\":\"foo\",\"value\":\"\xff\"}]}]}"))
	f.Add([]byte(`{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"\ud800"}]}]}`))
	f.Add([]byte(`{"domain":"rl","descriptors":[{"entries":[` + strings.Repeat(`{},`, 2000) + `{}]}]}`))
	clk := testrules.NewClock()
	s := New(testrules.Local(f, loadEnvoyRules(f), clk, 0), Options{ResponseHeaders: true})
	h := JSONHandler(s, 1<<16)
	schema := strictjson.MustForProto(&rlsv3.RateLimitRequest{}, strictjson.DescriptorBounds(s.opts.Bounds)...)
	b := s.opts.Bounds
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(body)))
		switch rec.Code {
		case 200, 429, 400, 413:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		var req rlsv3.RateLimitRequest
		if schema.Decode(body, &req) != nil {
			return
		}
		if len(req.Descriptors) > b.MaxDescriptors {
			t.Fatalf("accepted %d descriptors", len(req.Descriptors))
		}
		for _, d := range req.Descriptors {
			if len(d.Entries) > b.MaxEntries {
				t.Fatalf("accepted %d entries", len(d.Entries))
			}
			for _, e := range d.Entries {
				if len(e.Key) > b.MaxKeyBytes || len(e.Value) > b.MaxValueBytes || !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
					t.Fatalf("accepted entry %q=%q", e.Key, e.Value)
				}
			}
		}
		out, err := protojson.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		var again rlsv3.RateLimitRequest
		if err := schema.Decode(out, &again); err != nil || !proto.Equal(&req, &again) {
			t.Fatalf("round trip of %q through %s: %v, %v", body, out, &again, err)
		}
	})
}

func TestHealthService(t *testing.T) {
	conn := dialRaw(t, newTestServer(t, Options{}))
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, resp, err)
		}
	}
}

func dialRaw(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	lis := listen(t)
	g, _ := NewGRPCServer(s)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestOverrideCacheIsBounded: a client inventing overrides cannot grow the
// cache past its bound, and rules built past it still count correctly.
func TestOverrideCacheIsBounded(t *testing.T) {
	o := newOverrides()
	lim := &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE}
	for i := range maxOverrides * 2 {
		es := []config.Entry{{Key: "k" + strconv.Itoa(i), Value: "v"}}
		r, err := o.rule("rl", es, lim, nil, nil)
		if err != nil || r.Limit != 7 || r.ID != "rl:override:k"+strconv.Itoa(i)+"@7/minute" {
			t.Fatalf("override %d: %+v %v", i, r, err)
		}
	}
	n := 0
	for i := range o.shards {
		n += len(o.shards[i].rules)
	}
	if n > maxOverrides || n < maxOverrides/2 {
		t.Fatalf("cache holds %d rules, bound %d", n, maxOverrides)
	}
	es := []config.Entry{{Key: "k1", Value: "other"}}
	a, _ := o.rule("rl", es, lim, nil, nil)
	b, _ := o.rule("rl", es, lim, nil, nil)
	if a != b {
		t.Fatal("a cached override is rebuilt")
	}
}

// failing is a Checker whose decisions fail for an internal reason.
type failing struct{ Checker }

func (f failing) Check(context.Context, *ratelimit.Request, *ratelimit.Decision) error {
	return errors.New("store exploded")
}

func TestInternalErrorsAreLoggedRateLimited(t *testing.T) {
	var log bytes.Buffer
	base := newTestServer(t, Options{})
	s := New(failing{base.c}, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	req := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a")}}
	for range 3 {
		_, err := s.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.Internal {
			t.Fatalf("got %v, want Internal", err)
		}
	}
	if n := strings.Count(log.String(), "store exploded"); n != 1 || s.Stats.Errors.Load() != 3 {
		t.Fatalf("%d log lines, %d errors counted:\n%s", n, s.Stats.Errors.Load(), log.String())
	}
}
