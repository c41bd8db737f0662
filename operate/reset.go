package operate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// ResetResult says what a reset forgot.
type ResetResult struct {
	Rule       string      `json:"rule"`
	CounterKey string      `json:"counter_key"`
	Mode       config.Mode `json:"mode"`
	Scope      string      `json:"scope"` // "all checkers", or "this checker" for mode: local
	StoreKeys  int         `json:"store_keys"`
}

// ErrNoReset is returned when the counter store cannot reset counters.
var ErrNoReset = errors.New("the counter store cannot reset counters")

// Reset forgets the counter of the rule entries match in domain: its
// count (every shard, and the previous window a sliding window still
// weighs) or its bucket debt, in the store for every checker; this checker
// re-reads it at once, the others at their next refresh (before it they
// still count the old consumption: they refuse more, never less).
// Consumption decided before the reset and still on its way to the store
// (one pipeline lag) is added after it. A `mode: local` counter lives in
// one checker: only this one's is reset.
func (o *Operator) Reset(ctx context.Context, domain string, entries []config.Entry) (ResetResult, error) {
	r, es, key, err := o.counterOf(domain, entries)
	if err != nil {
		return ResetResult{}, err
	}
	res := ResetResult{Rule: r.ID, CounterKey: key, Mode: r.Mode, Scope: "all checkers"}
	if r.Unlimited || r.Limit == 0 {
		return res, &ratelimit.FieldError{Field: "descriptor", Err: fmt.Errorf("rule %s keeps no counter (unlimited or blocking)", r.ID)}
	}
	if r.Mode == config.ModeLocal {
		o.c.Forget(ctx, r, es)
		res.Scope = "this checker"
		return res, nil
	}
	rst, ok := o.store.(counters.Resetter)
	if !ok {
		return res, ErrNoReset
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if r.Mode == config.ModeSync {
		q := counters.SyncRequestFor(r, key, 0)
		if err := rst.ResetSync(rctx, &q); err != nil {
			return res, fmt.Errorf("checker: resetting %s: %w", key, err)
		}
		res.StoreKeys = 1
		return res, nil
	}
	now := o.c.Now()
	keys := []string{key}
	if r.Shards > 1 { // every shard, and the shared counter of near-band charges
		for i := range r.Shards {
			keys = append(keys, counters.ShardKey(key, i))
		}
	}
	var items []counters.ResetItem
	for _, k := range keys {
		if r.Algorithm.Bucket() { // (a limit above 0: a bucket's counter is its TAT)
			items = append(items, counters.ResetItem{Key: k, Kind: counters.KindTAT})
			continue
		}
		ws := limiter.WindowStart(now, int64(r.Window))
		items = append(items, counters.ResetItem{Key: k, Kind: counters.KindWindow, Window: ws},
			counters.ResetItem{Key: k, Kind: counters.KindWindow, Window: ws - int64(r.Window)})
	}
	if err := rst.Reset(rctx, items); err != nil {
		return res, fmt.Errorf("checker: resetting %s: %w", key, err)
	}
	res.StoreKeys = len(items)
	o.c.Forget(rctx, r, es)
	return res, nil
}
