package checker

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

// counterOf finds the rule entries match in domain and the counter key
// (values hashed where the rule says so).
func (c *Checker) counterOf(domain string, entries []config.Entry) (*config.Rule, []config.Entry, string, error) {
	rs := c.rules.Load()
	dom, ok := rs.Lookup(domain)
	if !ok {
		return nil, nil, "", &ratelimit.FieldError{Field: "domain", Err: fmt.Errorf("%w %q", ratelimit.ErrUnknownDomain, domain)}
	}
	r := dom.Match(entries)
	if r == nil {
		return nil, nil, "", &ratelimit.FieldError{Field: "descriptor", Err: ErrNoRule}
	}
	req := c.applyHashing(&ratelimit.Request{Domain: domain, Descriptors: []ratelimit.Descriptor{{Entries: entries}}}, []*config.Rule{r})
	es := req.Descriptors[0].Entries
	return r, es, string(config.AppendCounterKey(nil, r, es)), nil
}

// Inspect reports the counter of the rule that entries match in domain.
// It reads the store once and never charges.
func (c *Checker) Inspect(ctx context.Context, domain string, entries []config.Entry) (KeyState, error) {
	r, es, key, err := c.counterOf(domain, entries)
	if err != nil {
		return KeyState{}, err
	}
	now := c.clock.Now()
	st := KeyState{Rule: r.ID, CounterKey: key, Mode: r.Mode, Limit: r.Limit, Ceiling: r.Ceiling()}
	if r.Unlimited || r.Limit == 0 || r.Mode == config.ModeLocal || r.Mode == config.ModeSync || kindOf(r) != counters.KindWindow {
		return c.probe(ctx, st, r, key, es)
	}
	st.WindowStart = limiter.WindowStart(now, int64(r.Window))

	h := c.counterHash(r, es)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	if e := sh.lookup(h, r, es); e != nil && !e.gone {
		e.ctr.roll(c, sh, e, now)
		v := e.ctr.look(c, e, now, 0)
		st.Local = &LocalState{Used: v.used, Mine: v.mine, Remaining: v.remaining,
			Pending: int64(e.pend.Counted), OthersRate: e.Others, Instances: int(e.Instances), NextRefresh: e.nextRefresh}
		if e.overUntil > now {
			st.Local.OverUntil = e.overUntil
		}
	}
	sh.mu.Unlock()

	keys := []string{key}
	if r.Shards > 1 { // every shard, and the shared counter of near-band charges (hot.go)
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
	if err := c.store.Read(rctx, c.instance, items); err != nil {
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
func (c *Checker) probe(ctx context.Context, st KeyState, r *config.Rule, key string, es []config.Entry) (KeyState, error) {
	now := c.clock.Now()
	p := &ProbeState{Scope: "this checker"}
	switch {
	case r.Unlimited:
		p.Allowed, p.Unlimited = true, true
	case r.Limit == 0: // blocks everything
		p.ResetAfterMs = (limiter.WindowStart(now, int64(r.Window)) + int64(r.Window) - now) / 1e6
	case r.Mode == config.ModeLocal:
		d, err := c.local.PeekAt(c.localKey(key), r.Limiter, now, 0)
		if err != nil {
			return st, fmt.Errorf("checker: peeking at %s: %w", key, err)
		}
		p.Remaining, p.ResetAfterMs = d.Remaining, d.ResetAfter.Milliseconds()
	case r.Mode == config.ModeSync: // a cost-0 charge changes nothing
		q := counters.SyncRequestFor(r, key, 0)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := c.store.ChargeSync(rctx, &q)
		cancel()
		if err != nil {
			return st, fmt.Errorf("checker: reading %s from the store: %w", key, err)
		}
		p.Scope, p.Remaining, p.ResetAfterMs = "all checkers", res.Remaining, res.ResetAfter.Milliseconds()
	default: // a bucket: this checker's exact view, else the store's
		g := gcraOf(r)
		var gs limiter.State
		h := c.counterHash(r, es)
		sh := &c.shards[h&c.mask]
		sh.mu.Lock()
		e := sh.lookup(h, r, es)
		held := e != nil && !e.gone
		var rem int64
		var reset time.Duration
		if held {
			rem, reset = e.ctr.state(c, e, now, 0)
		}
		sh.mu.Unlock()
		if !held {
			items := []counters.ReadItem{{Key: c.storeKey(key, r), Kind: counters.KindTAT}}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.store.Read(rctx, c.instance, items)
			cancel()
			if err != nil {
				return st, fmt.Errorf("checker: reading %s from the store: %w", key, err)
			}
			if items[0].Found {
				g.Raise(&gs, items[0].Total)
			}
			p.Scope = "all checkers"
			d, _ := g.AllowAt(&gs, now, 0)
			rem, reset = d.Remaining, d.ResetAfter
		}
		p.Remaining, p.ResetAfterMs = rem, reset.Milliseconds()
	}
	if !p.Unlimited {
		p.Allowed = p.Remaining >= 1
		if p.ResetAfterMs == 0 && r.Limit > 0 { // fresh: when it would reset, as a check's status says
			p.ResetAfterMs = freshReset(r, now).Milliseconds()
		}
	}
	st.Probe = p
	return st, nil
}

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
func (c *Checker) Reset(ctx context.Context, domain string, entries []config.Entry) (ResetResult, error) {
	r, es, key, err := c.counterOf(domain, entries)
	if err != nil {
		return ResetResult{}, err
	}
	res := ResetResult{Rule: r.ID, CounterKey: key, Mode: r.Mode, Scope: "all checkers"}
	if r.Unlimited || r.Limit == 0 {
		return res, &ratelimit.FieldError{Field: "descriptor", Err: fmt.Errorf("rule %s keeps no counter (unlimited or blocking)", r.ID)}
	}
	if r.Mode == config.ModeLocal {
		c.local.Reset(c.localKey(key), r.Limiter)
		res.Scope = "this checker"
		return res, nil
	}
	rst, ok := c.store.(counters.Resetter)
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
	now := c.clock.Now()
	keys := []string{key}
	if r.Shards > 1 { // every shard, and the shared counter of near-band charges (hot.go)
		for i := range r.Shards {
			keys = append(keys, counters.ShardKey(key, i))
		}
	}
	var items []counters.ResetItem
	for _, k := range keys {
		if kindOf(r) == counters.KindTAT {
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

	h := c.counterHash(r, es)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	if sh.tombs != nil { // an evicted key must not come back refused
		i, j := tombSlots(h, len(sh.tombs))
		sh.tombs[i], sh.tombs[j] = 0, 0
	}
	e := sh.lookup(h, r, es)
	held := e != nil && !e.gone
	if held {
		e.overUntil, e.room, e.roomUntil = 0, 0, 0
		if e.parked {
			sh.parkedStale++
		}
		e.active, e.parked = true, false // a read to make, even of a key nobody uses now
		sh.schedule(e, now)              // learn the reset before the next decision
	}
	sh.mu.Unlock()
	if held {
		c.Refresh(rctx)
	}
	return res, nil
}
