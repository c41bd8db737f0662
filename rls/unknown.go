package rls

import (
	"context"
	"net/url"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/velvetrope/velvetrope/config"
)

// UnknownDomainTrailer is the gRPC trailer a ShouldRateLimit call for a
// domain without rules carries. Envoy's API answers such a call OK with
// no limit, and so does this service (Envoy deployments send descriptors
// before their rules exist); Envoy ignores trailers it does not know, so
// the trailer changes nothing for it, while a client that wants to tell
// "allowed" from "nothing here decides" (velvetrope check) reads it. Its
// value lists the domains the service has rules for, each query-escaped
// (url.QueryEscape: no comma survives), comma-separated, sorted; past
// MaxListedDomains the list ends with "*", which no escaped name can be.
// The same names are public on GET /v1/rules.
const UnknownDomainTrailer = "velvetrope-unknown-domain"

// MaxListedDomains is how many domains UnknownDomainTrailer lists at
// most: a multi-tenant rule set may hold thousands, and a trailer is
// sent whole.
const MaxListedDomains = 64

// knownDomains is the trailer of one rule set, built once per set.
type knownDomains struct {
	rs *config.RuleSet
	md metadata.MD
}

// unknownDomains caches the trailer of the live rule set.
type unknownDomains struct{ p atomic.Pointer[knownDomains] }

// trailer returns the trailer for rs: built on the first unknown-domain
// call after a reload, shared by the calls after it (gRPC copies a
// trailer's values, never changes them).
func (u *unknownDomains) trailer(rs *config.RuleSet) metadata.MD {
	if k := u.p.Load(); k != nil && k.rs == rs {
		return k.md
	}
	domains := rs.Domains()
	n := min(len(domains), MaxListedDomains)
	parts := make([]string, 0, n+1)
	for _, d := range domains[:n] {
		parts = append(parts, url.QueryEscape(d))
	}
	if len(domains) > n {
		parts = append(parts, "*")
	}
	md := metadata.Pairs(UnknownDomainTrailer, strings.Join(parts, ","))
	u.p.Store(&knownDomains{rs: rs, md: md})
	return md
}

// markUnknown sets the unknown-domain trailer on a gRPC call (not on a
// POST /json one: its context has no gRPC stream).
func (s *Server) markUnknown(ctx context.Context, rs *config.RuleSet) {
	if grpc.ServerTransportStreamFromContext(ctx) == nil {
		return
	}
	_ = grpc.SetTrailer(ctx, s.unknown.trailer(rs)) // fails only once the call has ended
}
