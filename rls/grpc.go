package rls

import (
	"context"
	"runtime"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/tap"
)

// StreamWorkers is the size of the server's stream worker pool (see
// NewGRPCServer): 32 per CPU, at least 64.
func StreamWorkers() uint32 { return uint32(max(32*runtime.GOMAXPROCS(0), 64)) }

// NewGRPCServer returns a gRPC server serving s as Envoy's rate limit
// service, velvetrope's charge service (ChargeService) and the standard
// health service (SERVING for "" and for
// envoy.service.ratelimit.v3.RateLimitService). Server reflection is the
// caller's to register (google.golang.org/grpc/reflection): velvetrope's
// processes do unless grpc.reflection is false; it serves the generated
// Envoy descriptors, which describe the wire format the handler reads.
// A connection carries at most s's MaxConcurrentStreams calls at once,
// and no call has a deadline further than s's CallTimeout (callDeadline). opts come after the defaults, so a caller can override
// them (not the deadline: gRPC takes one tap handle, and it is this one).
func NewGRPCServer(s *Server, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	// A pool of stream workers serves the calls: a goroutine per call
	// (gRPC's default) grows a fresh stack on every call, which showed as a
	// tenth of the server's CPU under load. gRPC falls back to a fresh
	// goroutine whenever every worker is busy, and a call near a limit
	// waits on the store (a batched charge): so many more workers than
	// CPUs, each parked when idle.
	defaults := []grpc.ServerOption{grpc.NumStreamWorkers(StreamWorkers()), grpc.ForceServerCodecV2(newCodec()),
		grpc.MaxConcurrentStreams(s.opts.MaxConcurrentStreams), grpc.InTapHandle(callDeadline(s.opts.CallTimeout))}
	g := grpc.NewServer(append(defaults, opts...)...)
	g.RegisterService(s.serviceDesc(), s) // ShouldRateLimit without generated messages (wire.go)
	RegisterCharges(g, s)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	return g, h
}

// healthWatch is the health service's server stream, and quotaStream the
// rate limit quota service's (package rlqs): they live as long as their
// clients want (client-side health checking holds one per connection, a
// proxy one per worker), so no deadline is put on them.
const (
	healthWatch = "/grpc.health.v1.Health/Watch"
	quotaStream = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"
)

// callDeadline is the tap handle that gives a call a deadline at most d
// away: one d away when its client set none, or set one further (an
// attacker's grpc-timeout of hours would otherwise hold the stream as
// long). gRPC reads the request message under the stream's context, so a
// stream that sends its headers and nothing more ends at d with
// DEADLINE_EXCEEDED, and its memory and goroutine go with it: without
// this, 5,000 such streams on one connection stayed open as long as the
// connection did. A nearer deadline (Envoy's, tens of milliseconds) is
// kept as it is, at the cost of reading the clock. gRPC runs the tap with
// the connection's lock held, before anything of the stream is read: it
// only looks at the context.
func callDeadline(d time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d || info.FullMethodName == healthWatch || info.FullMethodName == quotaStream {
			return ctx, nil
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		// Not called here: gRPC cancels the stream's own context, this
		// one's parent, when the stream ends, and that stops the timer.
		_ = cancel
		return ctx, nil
	}
}
