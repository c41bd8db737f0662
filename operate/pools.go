package operate

import (
	"context"
	"errors"
	"fmt"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// PoolState is one pool as Pools lists it.
type PoolState struct {
	Domain string `json:"domain"`
	Name   string `json:"name"`
	Unit   string `json:"unit"`
	// Capacity is what the pool admits per window now: the file's, or an
	// operator's (Override) until deleted.
	Capacity     int64 `json:"capacity"`
	FileCapacity int64 `json:"file_capacity"`
	Override     bool  `json:"override"`
	// Used is what the pool's current window has counted in the store
	// (-1: the store did not answer).
	Used int64 `json:"used"`
}

// ErrNoPool is a pool the rules do not define.
var ErrNoPool = errors.New("unknown pool")

// SetPool sets a pool's capacity for every checker (an operator's or an
// autoscaler's call), applied here at once and by the others within a
// control poll.
func (o *Operator) SetPool(ctx context.Context, domain, name string, capacity int64) error {
	if o.ctl == nil {
		return ErrNoControls
	}
	pr := o.c.Rules().Pool(domain, name)
	if pr == nil {
		return &ratelimit.FieldError{Field: "pool", Err: fmt.Errorf("%w: no pool %q in domain %q", ErrNoPool, name, domain)}
	}
	if err := config.CheckPoolCapacity(capacity); err != nil { // the bound of a rule file's pool
		return &ratelimit.FieldError{Field: "requests_per_unit", Err: err}
	}
	es := pr.Path
	ct := counters.Control{ID: counters.ControlID(domain, es), Domain: domain, Entries: es, Action: counters.ActionPool,
		Limit: capacity, Rule: pr.ID, CreatedAt: o.c.Now()}
	if err := o.ctl.PutControl(ctx, ct); err != nil {
		return fmt.Errorf("checker: storing pool capacity: %w", err)
	}
	return o.c.SyncControls(ctx)
}

// ResetPool returns a pool to its file's capacity; it reports whether an
// operator's capacity was in force.
func (o *Operator) ResetPool(ctx context.Context, domain, name string) (bool, error) {
	pr := o.c.Rules().Pool(domain, name)
	if pr == nil {
		return false, &ratelimit.FieldError{Field: "pool", Err: fmt.Errorf("%w: no pool %q in domain %q", ErrNoPool, name, domain)}
	}
	return o.DeleteControl(ctx, counters.ControlID(domain, pr.Path))
}

// Pools lists every pool of the rules, with its capacity in force and
// what its current window has used.
func (o *Operator) Pools(ctx context.Context) []PoolState {
	var out []PoolState
	now := o.c.Now()
	for _, pr := range o.c.Rules().Pools() {
		r := o.c.PoolRule(pr)
		st := PoolState{Domain: pr.Domain, Name: pr.Name, Unit: pr.Unit.String(), Capacity: r.Limit, FileCapacity: pr.Limit,
			Override: r != pr, Used: -1}
		key := string(config.AppendCounterKey(nil, pr, pr.Path))
		items := []counters.ReadItem{{Key: key, Kind: counters.KindWindow, Window: limiter.WindowStart(now, int64(pr.Window))}}
		rctx, cancel := context.WithTimeout(ctx, o.c.StoreTimeout())
		if err := o.store.Read(rctx, o.c.Instance(), items); err == nil {
			st.Used = items[0].Total
		}
		cancel()
		out = append(out, st)
	}
	return out
}
