package checker

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// SyncControls reads the control store now (the poller does it every
// ControlPoll) and rebuilds what the request path applies when the store
// or the rules changed.
func (c *Checker) SyncControls(ctx context.Context) error {
	if c.ctlStore == nil {
		return nil
	}
	c.ctlMu.Lock()
	defer c.ctlMu.Unlock()
	now := c.clock.Now()
	since := c.ctlVersion
	if since == 0 {
		since = -1
	}
	v, list, err := c.ctlStore.Controls(ctx, since, now)
	if err != nil {
		c.Stats.ControlErrors.Add(1)
		return fmt.Errorf("checker: reading controls: %w", err)
	}
	rs := c.rules.Load()
	cur := c.controls.Load()
	switch {
	case v != c.ctlVersion || c.ctlVersion == 0:
		c.ctlVersion = v
	case cur != nil && cur.rules == rs && !cur.expiredBy(now):
		return nil // nothing changed
	case cur == nil:
		return nil
	default:
		list = cur.list // the rules changed or a control expired: rebuild
	}
	if set := c.compileControls(rs, list, now); len(set.list) > 0 {
		c.controls.Store(set) // also when none applies now: a reload may bring its rule back
	} else {
		c.controls.Store(nil) // the request path then skips controls with one load
	}
	return nil
}

// controlLoop re-reads the controls every ControlPoll.
func (c *Checker) controlLoop() {
	c.every(c.cfg.ControlPoll, nil, c.cfg.ControlPoll, func(ctx context.Context) {
		if err := c.SyncControls(ctx); err != nil {
			c.logControls.Warn("operator controls not refreshed; the last ones stay in force", "err", err)
		}
	})
}

// controlSet is what the request path applies: immutable once built.
type controlSet struct {
	rules   *config.RuleSet         // the rule set the overrides were built against
	pools   map[string]*config.Rule // pool rule id → the pool at an operator's capacity
	list    []counters.Control
	domains map[string]map[uint64]*liveControl
	n       int
	expires int64 // the earliest expiry (0: none)
}

// liveControl is one control compiled against the rule set.
type liveControl struct {
	ctl     *counters.Control
	entries []config.Entry
	expires int64
	// rule replaces the matched rule; nil leaves the descriptor unmatched
	// (an allow on a descriptor no rule limits).
	rule *config.Rule
	next *liveControl // same hash
}

// listed counts the controls in force at now as an operator lists them
// (operate's Controls, which a test holds equal): live, pool capacities
// apart. The controls gauge reads it.
func (s *controlSet) listed(now int64) int {
	n := 0
	for i := 0; s != nil && i < len(s.list); i++ {
		if s.list[i].Live(now) && s.list[i].Action != counters.ActionPool {
			n++
		}
	}
	return n
}

func (s *controlSet) expiredBy(now int64) bool { return s.expires != 0 && now >= s.expires }

// compileControls builds the request path's view of list under rs.
func (c *Checker) compileControls(rs *config.RuleSet, list []counters.Control, now int64) *controlSet {
	s := &controlSet{rules: rs, domains: map[string]map[uint64]*liveControl{}}
	for i := range list {
		ct := &list[i]
		if !ct.Live(now) {
			continue
		}
		s.list = append(s.list, *ct)
	}
	for i := range s.list {
		ct := &s.list[i]
		if ct.Action == counters.ActionPool { // a pool's capacity, not a descriptor's control
			if len(ct.Entries) == 1 {
				if pr := rs.Pool(ct.Domain, ct.Entries[0].Value); pr != nil {
					// a stored capacity is input too (another version, a hand edit)
					if config.CheckPoolCapacity(ct.Limit) != nil {
						continue
					}
					if r, err := pr.WithLimit(ct.Limit); err == nil {
						if s.pools == nil {
							s.pools = map[string]*config.Rule{}
						}
						s.pools[pr.ID] = r
					}
				}
			}
			continue
		}
		lc := &liveControl{ctl: ct, entries: ct.Entries, expires: ct.ExpiresAt}
		base := rs.RuleByID(ct.Rule)
		switch ct.Action {
		case counters.ActionAllow:
			if base != nil {
				lc.rule = base.Exempt()
			}
		case counters.ActionDeny:
			if base == nil {
				base, _ = config.OverrideRule(ct.Domain, ct.Entries, 0, config.Second, 1, nil)
				base.ID = config.InternalRuleID(ct.Domain, "control", "deny")
			}
			lc.rule = base.Blocked()
		case counters.ActionLimit:
			if base == nil || base.CheckLimit(ct.Limit) != nil {
				continue // the rule is gone, or the limit does not fit it (a reload changed its throttle)
			}
			r, err := base.WithLimit(ct.Limit)
			if err != nil {
				continue
			}
			lc.rule = r
		}
		if ct.ExpiresAt != 0 && (s.expires == 0 || ct.ExpiresAt < s.expires) {
			s.expires = ct.ExpiresAt
		}
		m := s.domains[ct.Domain]
		if m == nil {
			m = map[uint64]*liveControl{}
			s.domains[ct.Domain] = m
		}
		h := c.entriesHash(ct.Entries)
		lc.next = m[h]
		m[h] = lc
		s.n++
	}
	return s
}

// entriesHash hashes a descriptor's keys and values (controls match the
// exact entries, whatever rule they match).
func (c *Checker) entriesHash(es []config.Entry) uint64 {
	var h uint64 = 0x5bd1e995
	for i := range es {
		h = (h^maphash.String(c.seed, es[i].Key))*0x9e3779b97f4a7c15 + 1
		h = (h^maphash.String(c.seed, es[i].Value))*0x9e3779b97f4a7c15 + uint64(i)
	}
	return h
}

// applyControls replaces the matched rule of every descriptor that has a
// control in force. It runs only when the domain has controls, after
// hashing, and allocates nothing.
func (c *Checker) applyControls(m map[uint64]*liveControl, req *ratelimit.Request, matched []*config.Rule, now int64) {
	for i := range req.Descriptors {
		es := req.Descriptors[i].Entries
		for lc := m[c.entriesHash(es)]; lc != nil; lc = lc.next {
			if (lc.expires == 0 || now < lc.expires) && slices.Equal(lc.entries, es) {
				matched[i] = lc.rule
				c.Stats.Controlled.Add(1)
				break
			}
		}
	}
}
