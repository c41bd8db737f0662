package loadgen

import (
	"context"
	"fmt"
	"net"
	"slices"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
	"github.com/velvetrope/velvetrope/rls"
)

// Noop is the ceiling of a comparison: velvetrope's own gRPC front (its
// server settings, its wire decoder and encoder) over a checker that
// answers OK to every descriptor without deciding anything. It measures
// what the load generator, gRPC and the machine allow a rate limit
// service; a service can only add to its cost. (A server of generated
// protobuf messages was slower than velvetrope's whole checker, and so
// no ceiling of it.)
type Noop struct {
	srv *rls.Server
}

// NewNoop returns a no-op service that knows domain (the one the load
// generator sends; every domain but it is answered as unknown, as a real
// service would).
func NewNoop(domain string) (*Noop, error) {
	f, err := config.ParseRules("noop.yaml", fmt.Appendf(nil,
		"domain: %q\ndescriptors:\n  - key: any\n    rate_limit: {unit: second, requests_per_unit: 1}\n", domain))
	if err != nil {
		return nil, fmt.Errorf("loadgen: no-op domain %q: %w", domain, err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		return nil, fmt.Errorf("loadgen: no-op domain %q: %w", domain, err)
	}
	return &Noop{srv: rls.New(noopChecker{rs}, rls.Options{})}, nil
}

// noopChecker admits everything.
type noopChecker struct{ rs *config.RuleSet }

func (c noopChecker) Rules() *config.RuleSet { return c.rs }

func (noopChecker) Check(_ context.Context, req *ratelimit.Request, d *ratelimit.Decision) error {
	d.Code = ratelimit.OK
	d.Statuses = slices.Grow(d.Statuses[:0], len(req.Descriptors))[:len(req.Descriptors)]
	clear(d.Statuses)
	return nil
}

// Serve serves n on lis until ctx ends.
func (n *Noop) Serve(ctx context.Context, lis net.Listener) error {
	s, _ := rls.NewGRPCServer(n.srv)
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
