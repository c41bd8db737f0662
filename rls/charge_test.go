package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testrules"
)

// chargeServers are the charge service over both engines, with request
// ids remembered.
func chargeServers(t *testing.T) map[string]*Server {
	out := map[string]*Server{}
	clk := testrules.NewClock()
	out["local"] = New(testrules.Local(t, loadEnvoyRules(t), clk, time.Minute), Options{})
	ms := counters.NewMemStore()
	ms.SetClock(clk)
	bus, err := events.NewMemBus(1, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checker.New(checker.Config{IdempotencyTTL: time.Minute}, loadEnvoyRules(t), ms, bus, clk)
	if err != nil {
		t.Fatal(err)
	}
	out["async"] = New(c, Options{})
	return out
}

// TestChargeOverGRPC: velvetrope.v1.Charges/Charge counts a cost after the
// response whatever the counter holds, answers OK with what remains, is
// counted once under its request id, and the next ShouldRateLimit is
// refused.
func TestChargeOverGRPC(t *testing.T) {
	for name, s := range chargeServers(t) {
		t.Run(name, func(t *testing.T) {
			conn := dialRaw(t, s)
			client := rlsv3.NewRateLimitServiceClient(conn)
			ctx := metadata.AppendToOutgoingContext(context.Background(), RequestIDMetadata, "resp-7")
			req := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a")}, HitsAddend: 5}
			for range 2 {
				resp := new(rlsv3.RateLimitResponse)
				if err := conn.Invoke(ctx, ChargeMethod, req, resp); err != nil {
					t.Fatal(err)
				}
				if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK ||
					resp.Statuses[0].LimitRemaining != 0 || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
					t.Fatalf("charge answered %v", resp)
				}
			}
			probe := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a")}}
			resp, err := client.ShouldRateLimit(context.Background(), probe)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("after the charge: %v %v", resp, err)
			}
			cases := []struct {
				name string
				req  *rlsv3.RateLimitRequest
				md   []string
				code codes.Code
			}{
				{"no hits", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "b")}}, nil, codes.InvalidArgument},
				{"no descriptors", &rlsv3.RateLimitRequest{Domain: "rl", HitsAddend: 1}, nil, codes.InvalidArgument},
				{"two ids", req, []string{RequestIDMetadata, "a", RequestIDMetadata, "b"}, codes.InvalidArgument},
				{"an id of another charge", &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "c")}, HitsAddend: 1},
					[]string{RequestIDMetadata, "resp-7"}, codes.FailedPrecondition},
			}
			for _, c := range cases {
				ctx := context.Background()
				if c.md != nil {
					ctx = metadata.AppendToOutgoingContext(ctx, c.md...)
				}
				err := conn.Invoke(ctx, ChargeMethod, c.req, new(rlsv3.RateLimitResponse))
				if status.Code(err) != c.code {
					t.Errorf("%s: %v, want %v", c.name, err, c.code)
				}
			}
			// per-descriptor hits_addend is a charge's cost too
			per := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "d")}}
			per.Descriptors[0].HitsAddend = wrapperspb.UInt64(1)
			resp = new(rlsv3.RateLimitResponse)
			if err := conn.Invoke(context.Background(), ChargeMethod, per, resp); err != nil || resp.Statuses[0].LimitRemaining != 1 {
				t.Fatalf("per-descriptor hits: %v %v", resp, err)
			}
		})
	}
}

// TestStreamDoneHitsAddend: Envoy's `apply_on_stream_done` call is a
// ShouldRateLimit whose hits_addend is the response's cost and whose
// answer Envoy ignores. Under Envoy's semantics (an Envoy-format rule)
// every call counts, refused or not, so the cost takes the key past its
// limit and the next request is refused until the window rolls.
func TestStreamDoneHitsAddend(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			clk := testrules.NewClock()
			client := dial(t, New(e.make(t, loadEnvoyRules(t), clk), Options{}))
			ask := func(hits uint32) rlsv3.RateLimitResponse_Code {
				resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "llm")}, HitsAddend: hits})
				if err != nil {
					t.Fatal(err)
				}
				return resp.OverallCode
			}
			if got := ask(1); got != rlsv3.RateLimitResponse_OK { // the request, before the backend
				t.Fatalf("first request: %v", got)
			}
			ask(40) // stream done: the response cost 40 tokens (the answer is Envoy's to ignore)
			if got := ask(1); got != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("the request after a costly response: %v", got)
			}
			clk.Set(time.Minute)
			if got := ask(1); got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("a new window: %v", got)
			}
		})
	}
}

// TestStreamDoneChargeMarker: a stream-done ShouldRateLimit whose
// descriptors end with the velvetrope_charge entry is a charge under an
// algorithm rule too: counted past the limit although the rule refuses
// what does not fit, on the counter of the descriptor without the marker.
func TestStreamDoneChargeMarker(t *testing.T) {
	const src = "domain: llm\ndescriptors:\n  - key: tenant\n    algorithm: token_bucket\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			clk := testrules.NewClock()
			client := dial(t, New(e.make(t, testrules.Store(t, src), clk), Options{}))
			ask := func(hits uint32, kv ...string) (rlsv3.RateLimitResponse_Code, error) {
				resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(kv...)}, HitsAddend: hits})
				if err != nil {
					return 0, err
				}
				return resp.OverallCode, nil
			}
			if got, err := ask(1, "tenant", "acme"); err != nil || got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("the request: %v %v", got, err)
			}
			// without the marker a cost of 40 on a bucket of 10 is refused and counts nothing
			if got, _ := ask(40, "tenant", "acme"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("an uncharged cost of 40: %v", got)
			}
			if got, _ := ask(1, "tenant", "acme"); got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("a refused call counted: %v", got)
			}
			if got, err := ask(40, "tenant", "acme", ChargeMarker, "after"); err != nil || got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("the stream-done charge: %v %v", got, err)
			}
			if got, _ := ask(1, "tenant", "acme"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("the request after the charge: %v", got)
			}
			if _, err := ask(1, ChargeMarker, "after"); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("a marker alone: %v", err)
			}
			// a marker on some descriptors only: a charge and a decision are separate calls
			_, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", HitsAddend: 1,
				Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant", "acme", ChargeMarker, "after"), desc("tenant", "b")}})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[1].entries") {
				t.Fatalf("a marker on one descriptor of two: %v", err)
			}
		})
	}
}

// TestEnvoyConcurrencyRelease: over Envoy's API a concurrency rule holds
// a request in flight until a stream-done call with is_negative_hits on
// the same descriptors gives its lease back.
func TestEnvoyConcurrencyRelease(t *testing.T) {
	const src = "domain: llm\ndescriptors:\n  - key: tenant\n    concurrency: {max_in_flight: 1, lease_ttl: 30s}\n"
	clk := testrules.NewClock()
	client := dial(t, New(engines[1].make(t, testrules.Store(t, src), clk), Options{}))
	ask := func(negative bool) rlsv3.RateLimitResponse_Code {
		d := desc("tenant", "acme")
		d.IsNegativeHits = negative
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	steps := []struct {
		negative bool
		want     rlsv3.RateLimitResponse_Code
	}{
		{false, rlsv3.RateLimitResponse_OK}, {false, rlsv3.RateLimitResponse_OVER_LIMIT},
		{true, rlsv3.RateLimitResponse_OK}, {false, rlsv3.RateLimitResponse_OK}, {false, rlsv3.RateLimitResponse_OVER_LIMIT},
	}
	for i, s := range steps {
		if got := ask(s.negative); got != s.want {
			t.Fatalf("step %d (is_negative_hits %v): %v, want %v", i, s.negative, got, s.want)
		}
	}
}
