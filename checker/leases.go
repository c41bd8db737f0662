package checker

import (
	"context"
	"errors"
	"fmt"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Concurrency rules (config.AlgConcurrency) are sync rules whose counter
// is a set of leases in the store (counters.Leases): an admitted request
// holds one (ratelimit.NewLease) until it is released or its TTL ends.

// leaseRequest is the store request that releases lease.
func leaseRequest(lease string) (*counters.SyncRequest, error) {
	key, err := ratelimit.ParseLease(lease)
	if err != nil {
		return nil, err
	}
	return &counters.SyncRequest{Key: key, Rule: config.RuleOfCounterKey(key), Algorithm: config.AlgConcurrency}, nil
}

// ReleaseLease releases a concurrency lease a decision gave (its
// status's Lease), on whatever checker decided it: released is false
// when it was not held any more (released already, or expired). A lease
// id no checker issues is a *ratelimit.FieldError naming lease.
func (c *Checker) ReleaseLease(ctx context.Context, lease string) (released bool, err error) {
	q, err := leaseRequest(lease)
	if err != nil {
		return false, &ratelimit.FieldError{Field: "lease", Err: fmt.Errorf("%w: %w", ratelimit.ErrBadRequest, err)}
	}
	ls, ok := c.store.(counters.Leases)
	if !ok {
		return false, errors.New("checker: the counter store keeps no leases")
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	released, err = ls.ReleaseLease(ctx, q, lease)
	if released {
		c.Stats.LeasesReleased.Add(1)
	}
	return released, err
}

// releaseLeases releases one lease of each concurrency descriptor of req
// (Request.ReleaseLeases: Envoy's is_negative_hits, which names no
// lease): the counter's oldest. Other rules take nothing.
func (c *Checker) releaseLeases(ctx context.Context, p *pass, req *ratelimit.Request) error {
	ls, ok := c.store.(counters.Leases)
	if !ok {
		return errors.New("checker: the counter store keeps no leases")
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	for i := range p.slots {
		s := &p.slots[i]
		s.allowed, s.need = true, needNone
		// one lease per counter, whatever its hits and however many of the
		// request's descriptors name it: what an acquire takes
		if s.dupOf >= 0 || s.rule == nil || s.rule.Algorithm != config.AlgConcurrency || s.role != roleRule && s.role != roleDefer {
			continue
		}
		key := string(config.AppendCounterKey(nil, s.rule, s.entriesOf(req)))
		q := &counters.SyncRequest{Key: key, Rule: s.rule.ID, Algorithm: config.AlgConcurrency}
		released, err := ls.ReleaseLease(ctx, q, "")
		if err != nil {
			return fmt.Errorf("checker: release of rule %s: %w", s.rule.ID, err)
		}
		if released {
			c.Stats.LeasesReleased.Add(1)
		}
	}
	p.code = ratelimit.OK
	return nil
}

// holdsLease says a status of d holds a lease.
func holdsLease(d *ratelimit.Decision) bool {
	for i := range d.Statuses {
		if d.Statuses[i].Lease != "" {
			return true
		}
	}
	return false
}

// InFlight is the leases held in the whole fleet per concurrency rule of
// the live rules (the counter store's count).
func (c *Checker) InFlight(ctx context.Context) (map[string]int64, error) {
	var ids []string
	for _, r := range c.rules.Load().Rules() {
		if r.Algorithm == config.AlgConcurrency {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return map[string]int64{}, nil
	}
	ls, ok := c.store.(counters.Leases)
	if !ok {
		return nil, errors.New("checker: the counter store keeps no leases")
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	return ls.InFlight(ctx, ids)
}
