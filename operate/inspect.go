package operate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
)

// KeyState is one async counter as an operator sees it: this instance's
// view (what it decides from) and the store's (what every instance
// shares), side by side, so a lagging or drifting view is visible.
type KeyState struct {
	Rule       string      `json:"rule"`
	CounterKey string      `json:"counter_key"` // hashed values where the rule says hash_values
	Mode       config.Mode `json:"mode"`
	Limit      int64       `json:"limit"`
	Ceiling    int64       `json:"ceiling"` // the limit with a soft throttle's overage
	// WindowStart is the current window (window algorithms), unix ns.
	WindowStart int64       `json:"window_start_unix_nanos,omitempty"`
	Local       *LocalState `json:"local,omitempty"` // window counters; nil: this instance does not hold the key
	// Global is the store's view (window counters only).
	Global *GlobalState `json:"global,omitempty"`
	// Probe is what the next request of the key would see, for counters
	// kept other than as windows in the counter store (buckets, sync and
	// local mode, unlimited and blocking rules), as Scope says. Reading it
	// charges nothing and records no decision.
	Probe *ProbeState `json:"probe,omitempty"`
}

// ProbeState is what a zero-cost request of the key reports.
type ProbeState struct {
	Scope        string `json:"scope"`   // "all checkers" (sync, or a bucket this checker does not hold) or "this checker"
	Allowed      bool   `json:"allowed"` // a request of cost 1 would pass now
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	Unlimited    bool   `json:"unlimited,omitempty"`
}

// LocalState is this instance's view of a window counter.
type LocalState struct {
	Used       int64 `json:"used"`      // this window, all instances, as this instance estimates it
	Mine       int64 `json:"mine"`      // of which this instance's
	Remaining  int64 `json:"remaining"` // before the next request
	Pending    int64 `json:"pending"`   // hits decided here and not yet emitted
	OthersRate int64 `json:"others_rate_per_second"`
	Instances  int   `json:"instances"`
	// OverUntil: refused from memory until then (unix ns; 0: not over).
	OverUntil   int64 `json:"over_until_unix_nanos,omitempty"`
	NextRefresh int64 `json:"next_refresh_unix_nanos,omitempty"`
}

// GlobalState is the store's applied state of the counter (all shards).
type GlobalState struct {
	Found     bool  `json:"found"`
	Total     int64 `json:"total"` // window count applied
	Remaining int64 `json:"remaining"`
	Instances int   `json:"instances"`
}

// ErrNoRule is returned by Inspect and Reset for a descriptor no rule
// matches.
var ErrNoRule = errors.New("no rule matches the descriptor")

// Inspect reports the counter of the rule that entries match in domain.
// It reads the store once and never charges.
func (o *Operator) Inspect(ctx context.Context, domain string, entries []config.Entry) (KeyState, error) {
	r, es, key, err := o.counterOf(domain, entries)
	if err != nil {
		return KeyState{}, err
	}
	now := o.c.Now()
	st := KeyState{Rule: r.ID, CounterKey: key, Mode: r.Mode, Limit: r.Limit, Ceiling: r.Ceiling()}
	// (a rule with a limit counts in a bucket or in windows)
	if r.Unlimited || r.Limit == 0 || r.Mode == config.ModeLocal || r.Mode == config.ModeSync || r.Algorithm.Bucket() {
		return o.probe(ctx, st, r, key, es, now)
	}
	st.WindowStart = limiter.WindowStart(now, int64(r.Window))
	v, err := o.c.Counter(r, es, now)
	if err != nil {
		return st, err
	}
	if v.Held {
		st.Local = &LocalState{Used: v.Used, Mine: v.Mine, Remaining: v.Remaining, Pending: v.Pending,
			OthersRate: v.OthersRate, Instances: v.Instances, OverUntil: v.OverUntil, NextRefresh: v.NextRefresh}
	}

	keys := []string{key}
	if r.Shards > 1 { // every shard, and the shared counter of near-band charges
		for i := range r.Shards {
			keys = append(keys, counters.ShardKey(key, i))
		}
	}
	items := make([]counters.ReadItem, len(keys))
	for i, k := range keys {
		items[i] = counters.ReadItem{Key: k, Kind: counters.KindWindow, Window: st.WindowStart}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := o.store.Read(rctx, o.c.Instance(), items); err != nil {
		return st, fmt.Errorf("checker: reading %s from the store: %w", key, err)
	}
	st.Global = &GlobalState{}
	for _, it := range items {
		if it.Found {
			st.Global.Found = true
			st.Global.Total += it.Total
			st.Global.Instances = max(st.Global.Instances, it.Instances)
		}
	}
	st.Global.Remaining = max(0, r.Ceiling()-st.Global.Total)
	return st, nil
}

// probe fills st.Probe without deciding anything: an operator's look at
// a key must not count as a request (in the statistics or the analytics).
func (o *Operator) probe(ctx context.Context, st KeyState, r *config.Rule, key string, es []config.Entry, now int64) (KeyState, error) {
	p := &ProbeState{Scope: "this checker"}
	switch {
	case r.Unlimited:
		p.Allowed, p.Unlimited = true, true
	case r.Limit == 0: // blocks everything
		p.ResetAfterMs = (limiter.WindowStart(now, int64(r.Window)) + int64(r.Window) - now) / 1e6
	case r.Mode == config.ModeLocal:
		v, err := o.c.Counter(r, es, now)
		if err != nil {
			return st, fmt.Errorf("checker: peeking at %s: %w", key, err)
		}
		p.Remaining, p.ResetAfterMs = v.Remaining, v.ResetAfter.Milliseconds()
	case r.Mode == config.ModeSync: // a cost-0 charge changes nothing
		q := counters.SyncRequestFor(r, key, 0)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := o.store.ChargeSync(rctx, &q)
		cancel()
		if err != nil {
			return st, fmt.Errorf("checker: reading %s from the store: %w", key, err)
		}
		p.Scope, p.Remaining, p.ResetAfterMs = "all checkers", res.Remaining, res.ResetAfter.Milliseconds()
	default: // a bucket: this checker's exact view, else the store's
		v, _ := o.c.Counter(r, es, now) // (errs only for a local counter)
		if !v.Held {
			items := []counters.ReadItem{{Key: v.StoreKey, Kind: counters.KindTAT}}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := o.store.Read(rctx, o.c.Instance(), items)
			cancel()
			if err != nil {
				return st, fmt.Errorf("checker: reading %s from the store: %w", key, err)
			}
			var gs limiter.State
			if items[0].Found {
				v.Bucket.Raise(&gs, items[0].Total)
			}
			d, _ := v.Bucket.AllowAt(&gs, now, 0)
			v.Remaining, v.ResetAfter = d.Remaining, d.ResetAfter
			p.Scope = "all checkers"
		}
		p.Remaining, p.ResetAfterMs = v.Remaining, v.ResetAfter.Milliseconds()
	}
	if !p.Unlimited {
		p.Allowed = p.Remaining >= 1
		if p.ResetAfterMs == 0 && r.Limit > 0 { // fresh: when it would reset, as a check's status says
			p.ResetAfterMs = r.FreshReset(now).Milliseconds()
		}
	}
	st.Probe = p
	return st, nil
}
