package checker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/config"
)

// KeyState is one async counter as an operator sees it: this instance's
// view (what it decides from) and the store's (what every instance
// shares), side by side, so a lagging or drifting view is visible.
type KeyState struct {
	Rule       string `json:"rule"`
	CounterKey string `json:"counter_key"` // hashed values where the rule says hash_values
	Mode       string `json:"mode"`
	Limit      int64  `json:"limit"`
	Ceiling    int64  `json:"ceiling"` // the limit with a soft throttle's overage
	// WindowStart is the current window (window algorithms), unix ns.
	WindowStart int64       `json:"window_start_unix_nanos,omitempty"`
	Local       *LocalState `json:"local"` // nil: this instance does not hold the key
	Global      GlobalState `json:"global"`
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

// Errors of Inspect.
var (
	ErrNoRule        = errors.New("no rule matches the descriptor")
	ErrNotInspection = errors.New("only async window counters can be inspected")
)

// Inspect reports the counter of the rule that entries match in domain.
// It reads the store once and never charges.
func (c *Checker) Inspect(ctx context.Context, domain string, entries []config.Entry) (KeyState, error) {
	rs := c.rules.Load()
	dom, ok := rs.Lookup(domain)
	if !ok {
		return KeyState{}, &FieldError{"domain", fmt.Errorf("%w %q", ErrUnknownDomain, domain)}
	}
	r := dom.Match(entries)
	switch {
	case r == nil:
		return KeyState{}, &FieldError{"descriptor", ErrNoRule}
	case r.Unlimited || r.Limit == 0 || r.Mode != "async" || kindOf(r) != KindWindow:
		return KeyState{Rule: r.ID, Mode: r.Mode, Limit: r.Limit}, &FieldError{"descriptor",
			fmt.Errorf("%w; rule %s is %s/%s", ErrNotInspection, r.ID, r.Mode, or(r.Algorithm, "envoy fixed window"))}
	}
	req := c.applyHashing(&Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries}}}, []*config.Rule{r})
	es := req.Descriptors[0].Entries
	key := string(config.AppendCounterKey(nil, r, es))
	now := c.clock.Now()
	st := KeyState{Rule: r.ID, CounterKey: key, Mode: r.Mode, Limit: r.Limit, Ceiling: r.Ceiling(),
		WindowStart: windowStart(now, int64(r.Window))}

	h := c.counterHash(r, es)
	sh := &c.shards[h&c.mask]
	sh.mu.Lock()
	if e := sh.lookup(h, r, es); e != nil && !e.gone {
		c.roll(sh, e, now)
		v := c.windowView(e, now)
		st.Local = &LocalState{Used: v.used, Mine: e.cur.mine(), Remaining: v.remaining,
			Pending: int64(e.pend.counted + e.pendOld.counted), OthersRate: e.othersRate, Instances: e.instances, NextRefresh: e.nextRefresh}
		if e.overUntil > now {
			st.Local.OverUntil = e.overUntil
		}
	}
	sh.mu.Unlock()

	keys := []string{key}
	if r.Shards > 1 {
		keys = keys[:0]
		for i := range r.Shards {
			keys = append(keys, ShardKey(key, i))
		}
	}
	items := make([]ReadItem, len(keys))
	for i, k := range keys {
		items[i] = ReadItem{Key: k, Kind: KindWindow, Window: st.WindowStart}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.store.Read(rctx, c.instance, items); err != nil {
		return st, fmt.Errorf("checker: reading %s from the store: %w", key, err)
	}
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

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
