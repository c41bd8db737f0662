package client

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GRPC calls Envoy's rate limit service of a velvetrope checker.
type GRPC struct {
	conn    *grpc.ClientConn
	rls     rlsv3.RateLimitServiceClient
	timeout time.Duration
}

// DialGRPC connects to addr (host:port). With no options the connection is
// plaintext, for loopback and service meshes; pass transport credentials
// for TLS. Each call is bounded by timeout (0: only the caller's context).
func DialGRPC(addr string, timeout time.Duration, opts ...grpc.DialOption) (*GRPC, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	return &GRPC{conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn), timeout: timeout}, nil
}

// Close releases the connection.
func (g *GRPC) Close() error { return g.conn.Close() }

// Check asks for a decision. A refusal of a malformed request wraps
// ErrInvalidArgument; a timeout or an unreachable service is returned as
// is (the caller applies its failure policy).
func (g *GRPC) Check(ctx context.Context, req Request) (Response, error) {
	if g.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	var trailer metadata.MD
	out, err := g.rls.ShouldRateLimit(ctx, toProto(req), grpc.Trailer(&trailer))
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return Response{}, fmt.Errorf("%w: %s", ErrInvalidArgument, status.Convert(err).Message())
		}
		return Response{}, fmt.Errorf("client: ShouldRateLimit: %w", err)
	}
	resp := fromProto(out)
	if v := trailer.Get(unknownDomainTrailer); len(v) > 0 {
		resp.UnknownDomain = true
		resp.KnownDomains = knownDomains(v[0])
	}
	return resp, nil
}

// chargeMethod and requestIDMetadata are rls.ChargeMethod and
// rls.RequestIDMetadata (client imports no server package;
// TestChargeNames holds them equal).
const (
	chargeMethod      = "/velvetrope.v1.Charges/Charge"
	requestIDMetadata = "velvetrope-request-id"
)

// Charge counts a cost known after the response (velvetrope.v1.Charges):
// req.Hits (or a descriptor's Hits) is counted whatever the counters
// hold, and never refused; the statuses say what remains. With
// req.RequestID a retry is counted once. A store that cannot take the
// charge answers an error wrapping ErrUnavailable: retry with the same
// request id.
func (g *GRPC) Charge(ctx context.Context, req Request) (Response, error) {
	if g.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	if req.RequestID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, requestIDMetadata, req.RequestID)
	}
	out := new(rlsv3.RateLimitResponse)
	if err := g.conn.Invoke(ctx, chargeMethod, toProto(req), out); err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.FailedPrecondition:
			return Response{}, fmt.Errorf("%w: %s", ErrInvalidArgument, status.Convert(err).Message())
		case codes.Unavailable:
			return Response{}, fmt.Errorf("%w: %s", ErrUnavailable, status.Convert(err).Message())
		}
		return Response{}, fmt.Errorf("client: Charge: %w", err)
	}
	return fromProto(out), nil
}

// toProto is req as Envoy's message.
func toProto(req Request) *rlsv3.RateLimitRequest {
	in := &rlsv3.RateLimitRequest{Domain: req.Domain, HitsAddend: req.Hits,
		Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(req.Descriptors))}
	for i, d := range req.Descriptors {
		pd := &ratelimitv3.RateLimitDescriptor{Entries: make([]*ratelimitv3.RateLimitDescriptor_Entry, len(d.Entries))}
		for j, e := range d.Entries {
			pd.Entries[j] = &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
		}
		if d.Hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.Hits)
		}
		pd.IsNegativeHits = d.Release
		in.Descriptors[i] = pd
	}
	return in
}

// fromProto is Envoy's answer as a Response.
func fromProto(out *rlsv3.RateLimitResponse) Response {
	resp := Response{OverLimit: out.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: make([]Status, len(out.Statuses))}
	for i, s := range out.Statuses {
		st := Status{OverLimit: s.Code == rlsv3.RateLimitResponse_OVER_LIMIT, Remaining: uint64(s.LimitRemaining)}
		if l := s.CurrentLimit; l != nil {
			st.Limited, st.Limit, st.Name = true, uint64(l.RequestsPerUnit), l.Name
			st.Unit = strings.ToLower(l.Unit.String())
		} else if s.LimitRemaining == math.MaxUint32 {
			st.Unlimited = true
		}
		if d := s.DurationUntilReset; d != nil {
			st.ResetAfter = d.AsDuration()
		}
		resp.Statuses[i] = st
	}
	return resp
}

// unknownDomainTrailer is rls.UnknownDomainTrailer (client imports no
// server package; TestUnknownDomain holds the two equal).
const unknownDomainTrailer = "velvetrope-unknown-domain"

// knownDomains reads the trailer's list: query-escaped names,
// comma-separated; "*" (no escaped name) says the list was cut.
func knownDomains(v string) []string {
	if v == "" {
		return nil
	}
	parts := strings.Split(v, ",")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		if d, err := url.QueryUnescape(p); err == nil {
			out = append(out, d)
		}
	}
	return out
}
