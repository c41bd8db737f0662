package middleware

import (
	"context"
	"strings"

	"github.com/velvetrope/velvetrope/client"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Remote is a [ratelimit.Checker] that asks a velvetrope service over
// gRPC (Envoy's rate limit API). Its errors — timeouts, an unreachable
// service — are the Limiter's failures, handled by Options.FailOpen.
type Remote struct {
	c *client.GRPC
}

// NewRemote decides with c; its timeout is the per-call timeout.
func NewRemote(c *client.GRPC) *Remote { return &Remote{c: c} }

var units = map[string]config.Unit{"second": config.Second, "minute": config.Minute, "hour": config.Hour,
	"day": config.Day, "week": config.Week, "month": config.Month, "year": config.Year}

// Check implements Checker. The Envoy API names no rule ids: a status's
// rule is described by the rule's name, else the descriptor's keys, which
// is what the RateLimit headers show. A refused status may retry when its
// window resets, the only time the Envoy API reports. Nor does it carry
// leases: a concurrency rule's status (its unit UNKNOWN) has none, and a
// request with ReleaseLeases gives one back by its descriptors
// (is_negative_hits); a charge goes to velvetrope.v1.Charges.
func (rm *Remote) Check(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision) error {
	in := client.Request{Domain: req.Domain, Descriptors: make([]client.Descriptor, len(req.Descriptors))}
	// Hits travel per descriptor: the Envoy API reads a request-level 0 as
	// one hit, and a descriptor may carry its own.
	hits := make([]uint64, len(req.Descriptors))
	for i, desc := range req.Descriptors {
		hits[i] = uint64(max(req.Hits, 0))
		if desc.HasHits {
			hits[i] = uint64(max(desc.Hits, 0))
		}
		cd := client.Descriptor{Entries: make([]client.Entry, len(desc.Entries)), Hits: &hits[i], Release: req.ReleaseLeases}
		for j, e := range desc.Entries {
			cd.Entries[j] = client.Entry{Key: e.Key, Value: e.Value}
		}
		in.Descriptors[i] = cd
	}
	call := rm.c.Check
	if req.Charge { // a cost after the response: velvetrope.v1.Charges
		call, in.RequestID = rm.c.Charge, req.RequestID
	}
	resp, err := call(ctx, in)
	if err != nil {
		return err
	}
	d.Code = ratelimit.OK
	if resp.OverLimit {
		d.Code = ratelimit.OverLimit
	}
	d.Statuses = d.Statuses[:0]
	for i, s := range resp.Statuses {
		st := ratelimit.Status{Code: ratelimit.OK, Limit: int64(s.Limit), Remaining: int64(s.Remaining), ResetAfter: s.ResetAfter}
		if s.OverLimit {
			st.Code, st.RetryAfter = ratelimit.OverLimit, s.ResetAfter
		}
		switch {
		case s.Unlimited:
			st.Rule = &config.Rule{Unlimited: true}
		case s.Limited && i < len(req.Descriptors):
			id := s.Name
			if id == "" {
				keys := make([]string, len(req.Descriptors[i].Entries))
				for j, e := range req.Descriptors[i].Entries {
					keys[j] = e.Key
				}
				id = req.Domain + ":" + strings.Join(keys, "/")
			}
			u := units[s.Unit]
			st.Rule = &config.Rule{ID: id, Domain: req.Domain, Limit: int64(s.Limit), Unit: u, Window: u.Duration()}
			if s.Unit == "unknown" { // Envoy's API has no unit for requests in flight: a concurrency rule's
				st.Rule.Algorithm = config.AlgConcurrency
			}
		}
		d.Statuses = append(d.Statuses, st)
	}
	return nil
}
