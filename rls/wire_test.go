package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// randomRequest draws a RateLimitRequest over the Envoy example rules:
// known and unknown domains and keys, overrides, per-descriptor and
// request hits, shadow and blocked values, sometimes malformed.
func randomRequest(t *rapid.T) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{
		Domain:     rapid.SampledFrom([]string{"rl", "edge_proxy_per_ip", "messaging", "nope", ""}).Draw(t, "domain"),
		HitsAddend: uint32(rapid.SampledFrom([]int{0, 0, 1, 2, 5}).Draw(t, "hits")),
	}
	for range rapid.IntRange(0, 4).Draw(t, "descriptors") {
		d := &ratelimitv3.RateLimitDescriptor{}
		for range rapid.IntRange(0, 3).Draw(t, "entries") {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{
				Key:   rapid.SampledFrom([]string{"foo", "bar", "baz", "bay", "qux", "remote_address", "message_type", "to_number", ""}).Draw(t, "key"),
				Value: rapid.SampledFrom([]string{"a", "b", "banned", "shady", "50.0.0.5", "marketing", "2061111111", ""}).Draw(t, "value"),
			})
		}
		if rapid.IntRange(0, 5).Draw(t, "override?") == 0 {
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: uint32(rapid.IntRange(0, 5).Draw(t, "per unit")),
				Unit:            typev3.RateLimitUnit(rapid.IntRange(0, 7).Draw(t, "unit")),
			}
			if rapid.Bool().Draw(t, "multiplier?") {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(uint32(rapid.IntRange(0, 3).Draw(t, "multiplier")))
			}
		}
		if rapid.IntRange(0, 4).Draw(t, "own hits?") == 0 {
			d.HitsAddend = wrapperspb.UInt64(uint64(rapid.IntRange(0, 4).Draw(t, "own hits")))
		}
		d.IsNegativeHits = rapid.IntRange(0, 20).Draw(t, "negative?") == 0
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// TestWireAgreesWithGeneratedTypes: the gRPC path (bytes in, bytes out)
// answers every request exactly as ShouldRateLimit does on the generated
// messages: two engines with the same rules and clock, the same random
// requests, the same answers or the same errors, response headers on.
func TestWireAgreesWithGeneratedTypes(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clk := testrules.NewClock()
		opts := Options{ResponseHeaders: true}
		viaTypes := New(testrules.Local(t, loadEnvoyRules(t), clk, 0), opts)
		viaWire := New(testrules.Local(t, loadEnvoyRules(t), clk, 0), opts)
		var now time.Duration
		for i := range rapid.IntRange(1, 30).Draw(rt, "calls") {
			now += time.Duration(rapid.IntRange(0, 1500).Draw(rt, "ms")) * time.Millisecond
			clk.Set(now)
			req := randomRequest(rt)
			want, werr := viaTypes.ShouldRateLimit(context.Background(), req)
			raw, err := proto.Marshal(req)
			if err != nil {
				rt.Fatal(err)
			}
			w := viaWire.work.Get().(*work)
			w.raw = append(w.raw[:0], raw...)
			out, gerr := viaWire.serveWire(context.Background(), w)
			viaWire.work.Put(w)
			if (werr == nil) != (gerr == nil) || status.Code(werr) != status.Code(gerr) || (werr != nil && werr.Error() != gerr.Error()) {
				rt.Fatalf("call %d %v: generated %v, wire %v", i, req, werr, gerr)
			}
			if werr != nil {
				continue
			}
			var got rlsv3.RateLimitResponse
			if err := proto.Unmarshal(*out.(*[]byte), &got); err != nil {
				rt.Fatalf("call %d: the wire answer does not decode: %v", i, err)
			}
			if !proto.Equal(&got, want) {
				rt.Fatalf("call %d %v:\nwire      %v\ngenerated %v", i, req, &got, want)
			}
		}
	})
}

// FuzzWireParse: any bytes parse without a panic; what parse accepts is
// within the bounds; bytes the generated code reads as a request get the
// same answer from parse and from ShouldRateLimit's conversion: the same
// checker request, or the same error.
func FuzzWireParse(f *testing.F) {
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a", "bar", "b")}, HitsAddend: 3},
		{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: desc("qux", "x").Entries,
			Limit:      &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)},
			HitsAddend: wrapperspb.UInt64(2)}}},
	} {
		b, _ := proto.Marshal(req)
		f.Add(b)
	}
	// issue 19's attack, small: 2,000 empty entries, then as many empty
	// descriptors, then one over each bound by one, then an unknown field
	// of the same size
	f.Add(wireRequest(2000))
	f.Add(wireRequest(make([]int, 2000)...))
	f.Add(wireRequest(9))
	f.Add(wireRequest(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1))
	f.Add(protowire.AppendBytes(protowire.AppendTag(wireRequest(1), 99, protowire.BytesType), make([]byte, 4000)))
	s := New(testrules.Local(f, loadEnvoyRules(f), testrules.NewClock(), 0), Options{})
	b := &s.opts.Bounds
	f.Fuzz(func(t *testing.T, raw []byte) {
		rs := s.c.Rules()
		w := &work{raw: raw}
		perr := w.parse(s.overrides, rs, b)
		if perr == nil {
			if n := len(w.req.Descriptors); n == 0 || n > b.MaxDescriptors {
				t.Fatalf("parse accepted %d descriptors", n)
			}
			for i, d := range w.req.Descriptors {
				if len(d.Entries) == 0 || len(d.Entries) > b.MaxEntries {
					t.Fatalf("parse accepted %d entries in descriptor %d", len(d.Entries), i)
				}
				if err := ratelimit.CheckEntries(b, i, d.Entries); err != nil {
					t.Fatalf("parse accepted entries outside the bounds: %v", err)
				}
			}
		}
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(raw, &req) != nil {
			return
		}
		if perr != nil && strings.HasPrefix(perr.Error(), "hits_addend: above") {
			// A varint above 32 bits in the uint32 hits_addend: the
			// generated code truncates it (protobuf's rule for a narrower
			// type), the wire parser refuses it rather than charge the
			// low bits. The one place the two are meant to differ.
			return
		}
		var ref work
		cerr := ref.convert(&req, s.overrides, rs, b)
		if (perr == nil) != (cerr == nil) || perr != nil && perr.Error() != cerr.Error() {
			t.Fatalf("%v: parse %v, convert %v", &req, perr, cerr)
		}
		if perr != nil {
			return
		}
		if w.req.Domain != ref.req.Domain || w.req.Hits != ref.req.Hits || len(w.req.Descriptors) != len(ref.req.Descriptors) {
			t.Fatalf("parse %+v, convert %+v", w.req, ref.req)
		}
		for i, d := range w.req.Descriptors {
			r := ref.req.Descriptors[i]
			if d.Hits != r.Hits || d.HasHits != r.HasHits || d.Rule != r.Rule || len(d.Entries) != len(r.Entries) {
				t.Fatalf("descriptor %d: parse %+v, convert %+v", i, d, r)
			}
			for j := range d.Entries {
				if d.Entries[j] != r.Entries[j] {
					t.Fatalf("descriptor %d entry %d: parse %v, convert %v", i, j, d.Entries[j], r.Entries[j])
				}
			}
		}
	})
}
