package checker

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// ControlSpec is what an operator asks for (POST /v1/controls).
type ControlSpec struct {
	Domain  string
	Entries []config.Entry
	Action  string
	Limit   int64
	TTL     time.Duration // 0: until deleted
	Reason  string
}

// ErrNoControls is returned when the checker's store keeps no controls.
var ErrNoControls = errors.New("the counter store keeps no operator controls")

// MaxControls bounds the controls one checker applies (allow and deny
// lists included); past it new controls are refused.
const MaxControls = 100_000

// MaxControlTTL bounds a control's ttl: a temporary control lasts at most
// a year (a permanent one has ttl 0, until deleted). The bound keeps the
// expiry, now + ttl in Unix nanoseconds, far inside an int64: 2500000h
// added to a 2026 clock wrapped to a negative expiry, a control that never
// applied and was never listed.
const MaxControlTTL = 365 * 24 * time.Hour

// SetControl validates spec, stores it for every checker and applies it
// here at once. Input errors are *FieldError values naming the field.
func (c *Checker) SetControl(ctx context.Context, spec ControlSpec) (counters.Control, error) {
	if c.ctlStore == nil {
		return counters.Control{}, ErrNoControls
	}
	rs := c.rules.Load()
	dom, known := rs.Lookup(spec.Domain)
	switch {
	case spec.Domain == "":
		return counters.Control{}, &ratelimit.FieldError{Field: "domain", Err: errors.New("must not be empty")}
	case !known:
		return counters.Control{}, &ratelimit.FieldError{Field: "domain", Err: fmt.Errorf("%w %q", ratelimit.ErrUnknownDomain, spec.Domain)}
	case len(spec.Entries) == 0 || len(spec.Entries) > config.MaxEntries:
		return counters.Control{}, &ratelimit.FieldError{Field: "descriptor", Err: fmt.Errorf("want 1 to %d entries, got %d", config.MaxEntries, len(spec.Entries))}
	case spec.TTL < 0 || spec.TTL > MaxControlTTL:
		return counters.Control{}, &ratelimit.FieldError{Field: "ttl", Err: fmt.Errorf("want 0 (until deleted) to %v, got %v", MaxControlTTL, spec.TTL)}
	case len(spec.Reason) > 512:
		return counters.Control{}, &ratelimit.FieldError{Field: "reason", Err: errors.New("longer than 512 bytes")}
	}
	for i, e := range spec.Entries {
		if e.Key == "" {
			return counters.Control{}, &ratelimit.FieldError{Field: fmt.Sprintf("descriptor[%d].key", i), Err: errors.New("must not be empty")}
		}
	}
	r := dom.Match(spec.Entries)
	switch spec.Action {
	case counters.ActionAllow, counters.ActionDeny:
		if spec.Limit != 0 {
			return counters.Control{}, &ratelimit.FieldError{Field: "limit", Err: fmt.Errorf("only action %q takes a limit", counters.ActionLimit)}
		}
	case counters.ActionLimit:
		if r == nil {
			return counters.Control{}, &ratelimit.FieldError{Field: "descriptor", Err: fmt.Errorf("%w in domain %q: a limit override needs a rule's algorithm and unit", ErrNoRule, spec.Domain)}
		}
		// checked before WithLimit multiplies it (ceiling, burst)
		if err := r.CheckLimit(spec.Limit); err != nil {
			return counters.Control{}, &ratelimit.FieldError{Field: "limit", Err: err}
		}
		if _, err := r.WithLimit(spec.Limit); err != nil {
			return counters.Control{}, &ratelimit.FieldError{Field: "limit", Err: err}
		}
		if spec.TTL == 0 {
			return counters.Control{}, &ratelimit.FieldError{Field: "ttl", Err: errors.New("a limit override is temporary: give it a ttl")}
		}
	default:
		return counters.Control{}, &ratelimit.FieldError{Field: "action", Err: fmt.Errorf("want %q, %q or %q, got %q", counters.ActionAllow, counters.ActionDeny, counters.ActionLimit, spec.Action)}
	}
	es := slices.Clone(spec.Entries)
	if r != nil && r.Hashed != nil {
		for i := range es {
			if i < len(r.Hashed) && r.Hashed[i] {
				es[i].Value = c.hash.Value(spec.Domain, es[i].Key, es[i].Value)
			}
		}
	}
	now := c.clock.Now()
	ct := counters.Control{ID: counters.ControlID(spec.Domain, es), Domain: spec.Domain, Entries: es, Action: spec.Action,
		Limit: spec.Limit, Reason: spec.Reason, CreatedAt: now}
	if r != nil {
		ct.Rule = r.ID
	}
	if spec.TTL > 0 {
		if now > math.MaxInt64-int64(spec.TTL) { // only a clock past the year 2261
			return counters.Control{}, &ratelimit.FieldError{Field: "ttl", Err: fmt.Errorf("%v from now is past the clock's range", spec.TTL)}
		}
		ct.ExpiresAt = now + int64(spec.TTL)
	}
	if cur := c.controls.Load(); cur != nil && cur.n >= MaxControls && cur.find(ct.ID) == nil {
		return counters.Control{}, fmt.Errorf("checker: %d controls in force: delete some first", MaxControls)
	}
	if err := c.ctlStore.PutControl(ctx, ct); err != nil {
		return counters.Control{}, fmt.Errorf("checker: storing control: %w", err)
	}
	return ct, c.SyncControls(ctx)
}

// DeleteControl removes the control id everywhere and here at once.
func (c *Checker) DeleteControl(ctx context.Context, id string) (bool, error) {
	if c.ctlStore == nil {
		return false, ErrNoControls
	}
	ok, err := c.ctlStore.DeleteControl(ctx, id)
	if err != nil {
		return false, fmt.Errorf("checker: deleting control: %w", err)
	}
	return ok, c.SyncControls(ctx)
}

// Controls returns the controls in force, as this checker applies them.
func (c *Checker) Controls() []counters.Control {
	cs := c.controls.Load()
	if cs == nil {
		return []counters.Control{}
	}
	now := c.clock.Now()
	out := make([]counters.Control, 0, len(cs.list))
	for i := range cs.list {
		if cs.list[i].Live(now) && cs.list[i].Action != counters.ActionPool { // pools: Pools
			out = append(out, cs.list[i])
		}
	}
	return out
}

// ControlFor returns the control in force for one descriptor (entries as
// the operator writes them), if any.
func (c *Checker) ControlFor(domain string, entries []config.Entry) (counters.Control, bool) {
	cs := c.controls.Load()
	if cs == nil {
		return counters.Control{}, false
	}
	r := c.rules.Load().Match(domain, entries)
	es := entries
	if r != nil && r.Hashed != nil {
		req := c.applyHashing(&ratelimit.Request{Domain: domain, Descriptors: []ratelimit.Descriptor{{Entries: entries}}}, []*config.Rule{r})
		es = req.Descriptors[0].Entries
	}
	if ct := cs.find(counters.ControlID(domain, es)); ct != nil && ct.Live(c.clock.Now()) {
		return *ct, true
	}
	return counters.Control{}, false
}

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

func (s *controlSet) find(id string) *counters.Control {
	for i := range s.list {
		if s.list[i].ID == id {
			return &s.list[i]
		}
	}
	return nil
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
