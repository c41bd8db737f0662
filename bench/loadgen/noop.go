package loadgen

import (
	"context"
	"net"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/velvetrope/velvetrope/rls"
)

// Noop is the ceiling of a comparison: an Envoy rate limit service that
// decodes each request and answers OK without doing anything else, so it
// measures what the load generator, gRPC and the machine allow.
type Noop struct {
	rlsv3.UnimplementedRateLimitServiceServer
	ok *rlsv3.RateLimitResponse
}

// NewNoop returns a no-op service.
func NewNoop() *Noop {
	return &Noop{ok: &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}}
}

// ShouldRateLimit answers OK.
func (n *Noop) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return n.ok, nil
}

// Serve serves n on lis until ctx ends.
func (n *Noop) Serve(ctx context.Context, lis net.Listener) error {
	// the stream workers velvetrope's own server uses, so the ceiling is
	// what the same server settings allow
	s := grpc.NewServer(grpc.NumStreamWorkers(rls.StreamWorkers()))
	rlsv3.RegisterRateLimitServiceServer(s, n)
	go func() {
		<-ctx.Done()
		s.Stop()
	}()
	err := s.Serve(lis)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
