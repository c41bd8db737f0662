package rls

import (
	"runtime"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// StreamWorkers is the size of the server's stream worker pool (see
// NewGRPCServer): 32 per CPU, at least 64.
func StreamWorkers() uint32 { return uint32(max(32*runtime.GOMAXPROCS(0), 64)) }

// NewGRPCServer returns a gRPC server serving s as Envoy's rate limit
// service and the standard health service (SERVING for "" and for
// envoy.service.ratelimit.v3.RateLimitService). Server reflection is not
// registered: it would publish the API surface to anyone who can connect.
// opts come after the defaults, so a caller can override them.
func NewGRPCServer(s *Server, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	// A pool of stream workers serves the calls: a goroutine per call
	// (gRPC's default) grows a fresh stack on every call, which showed as a
	// tenth of the server's CPU under load. gRPC falls back to a fresh
	// goroutine whenever every worker is busy, and a call near a limit
	// waits on the store (a batched charge): so many more workers than
	// CPUs, each parked when idle.
	defaults := []grpc.ServerOption{grpc.NumStreamWorkers(StreamWorkers()), grpc.ForceServerCodecV2(newCodec())}
	g := grpc.NewServer(append(defaults, opts...)...)
	g.RegisterService(s.serviceDesc(), s) // ShouldRateLimit without generated messages (wire.go)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	return g, h
}
