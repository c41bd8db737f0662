package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/limiter"
)

// Entry is one key=value pair of a request descriptor.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Rule is a compiled limit: what one matched descriptor path is held to.
// Rules are immutable once in a RuleSet.
type Rule struct {
	// ID is the rule's stable identity: domain ":" path, the path being the
	// descriptor keys (and "=" values where the rule names one) joined by
	// "/", each part escaped ([AppendEscaped]), e.g.
	// `api:tenant/route=\/export`. Distinct rules never share an id.
	// Counters are keyed by it, not by the limit, so editing a limit keeps
	// the count.
	ID     string
	Domain string
	Name   string // rate_limit.name, the target of other rules' replaces
	Path   []Entry

	Unlimited      bool
	Limit          int64 // requests_per_unit; 0 refuses every request (Envoy's block)
	Unit           Unit
	Window         time.Duration // Unit.Duration()
	Shadow         bool
	DetailedMetric bool
	Replaces       []string
	// Shared[i] is true where entry i is a wildcard with share_threshold:
	// every matching value counts against one counter.
	Shared []bool
	// Hashed[i] is true where entry i's values are replaced by a keyed hash
	// before they leave the checker (hash_values); nil when none is.
	Hashed []bool

	// Algorithm is "" for Envoy's semantics (fixed window aligned to the
	// unit, every call charged), or the extension's name.
	Algorithm Algorithm
	Burst     int64
	Throttle  Throttle
	OnExceed  OnExceed
	Mode      Mode
	NearLimit NearLimit // async rules only
	Failure   FailurePolicy
	Shards    int64
	// Defer is where an `on_exceed: defer` rule's deferred requests go.
	Defer DeferSpec
	// Pool is the capacity an elastic rule borrows from (throttle.pool,
	// compiled); nil for other rules.
	Pool *Rule
	// IsPool marks the rule of a pool itself: a fixed window over the
	// domain's shared capacity.
	IsPool bool

	// Limiter is the exact in-process algorithm for this rule, built once
	// (an interface value, so passing it allocates nothing). A soft
	// throttle's ceiling is part of it. Nil for unlimited rules and for
	// Limit 0.
	Limiter limiter.Algorithm
	Pos     Position

	// Override is set on the rules of per-request limit overrides
	// ([OverrideRule]); Base is then the rule of the rule set the same
	// entries match, if any: the override is reported under its label and
	// hashes the values it hashes.
	Override bool
	Base     *Rule

	// Plans is set on a rule whose clients' limits come from their plans
	// (a plans block); nil otherwise, and on the rules of its plans.
	Plans *Plans
	// Extra are a limits descriptor's further limits, each a rule of its
	// own decided beside this one (the first); nil for one limit.
	Extra []*Rule

	ceiling, capacity int64 // derived at compile time
}

// MetricID is the rule's label in metrics, bounded by the rule set
// whatever the requests carry: the ID, or for an override its base rule's
// ID (else domain ":override"), since an override's own ID carries a limit
// chosen per request.
func (r *Rule) MetricID() string {
	switch {
	case !r.Override:
		return r.ID
	case r.Base != nil:
		return r.Base.ID
	}
	return r.Domain + ":override"
}

// Ceiling is the most the rule admits per window: the limit, raised by a
// soft throttle's overage or an elastic rule's multiplier.
func (r *Rule) Ceiling() int64 { return r.ceiling }

// Capacity is the bucket size for bucket algorithms (burst, else the
// ceiling) and the ceiling for windows.
func (r *Rule) Capacity() int64 { return r.capacity }

// FreshReset is the reset a counter of r reports while it is fresh (empty
// window, full bucket, empty log: the algorithms' own ResetAfter is then
// 0, nothing to forget): when a hit charged at now would be forgotten,
// which is what a request of one hit reports. A probe (hits 0) of a fresh
// key then says when its window or bucket would reset, as the request
// after it will, rather than 0:
//
//   - fixed windows and Envoy's: the end of the window containing now
//     (windows aligned to the Unix epoch);
//   - sliding_window: the end of the next window, where a hit of this one
//     stops weighing;
//   - sliding_log: one window from now;
//   - token_bucket, leaky_bucket, gcra: one hit's refill, window / limit
//     rounded up.
func (r *Rule) FreshReset(now int64) time.Duration {
	W := int64(r.Window)
	if W <= 0 || r.Unlimited {
		return 0
	}
	into := now - limiter.WindowStart(now, W)
	switch {
	case r.Algorithm == AlgSlidingWindow:
		return time.Duration(2*W - into)
	case r.Algorithm == AlgSlidingLog:
		return r.Window
	case r.Algorithm.Bucket():
		l := max(r.Limit, 1)
		d := W / l
		if W%l != 0 {
			d++
		}
		return time.Duration(d)
	}
	return time.Duration(W - into)
}

// derive computes the values the hot path reads on every decision.
func (r *Rule) derive() {
	r.ceiling = r.Limit
	switch r.Throttle.Type {
	case ThrottleSoft:
		r.ceiling = r.Limit + (r.Limit*r.Throttle.OveragePercent+99)/100
	case ThrottleElastic:
		r.ceiling = r.Limit * r.Throttle.MaxMultiplier
	}
	r.capacity = r.ceiling
	if r.Burst > 0 {
		r.capacity = r.Burst
	}
}

// WithLimit returns a copy of r that admits limit hits per window, with
// everything else (id, algorithm, mode, counters) unchanged: an operator's
// temporary limit for one key keeps that key's count, as editing a limit
// does. limit 0 refuses every request; a limit the rule's throttle or
// burst cannot be derived with in 64 bits is refused ([Rule.CheckLimit]).
func (r *Rule) WithLimit(limit int64) (*Rule, error) {
	switch {
	case limit < 0:
		return nil, fmt.Errorf("limit: must be >= 0, got %d", limit)
	case r.Unlimited:
		return nil, fmt.Errorf("limit: rule %s is unlimited; an exemption or a deny is what applies to it", r.ID)
	}
	if err := r.CheckLimit(limit); err != nil {
		return nil, fmt.Errorf("limit: %w", err)
	}
	cp := *r
	cp.Limit, cp.Plans = limit, nil // a limit of its own: no plan changes it
	if cp.Burst > 0 && limit > 0 {
		// A burst is sized against the limit it was written for: scale it.
		cp.Burst = max(1, r.Burst*limit/max(r.Limit, 1))
	}
	cp.derive()
	cp.Limiter = nil
	if limit > 0 {
		cp.Limiter = cp.buildLimiter()
	}
	return &cp, nil
}

// Exempt returns a copy of r that admits everything and counts nothing
// (an operator's allow list entry or exemption).
func (r *Rule) Exempt() *Rule {
	cp := *r
	cp.Unlimited, cp.Limiter, cp.Extra = true, nil, nil // exempt from every limit
	return &cp
}

// Blocked returns a copy of r that refuses every request, also in shadow
// mode (an operator's deny list entry).
func (r *Rule) Blocked() *Rule {
	cp := *r
	cp.Unlimited, cp.Shadow, cp.Limit, cp.Limiter, cp.Extra = false, false, 0, nil, nil
	if cp.Window <= 0 {
		cp.Unit, cp.Window = Second, Second.Duration()
	}
	cp.derive()
	return &cp
}

func (r *Rule) buildLimiter() limiter.Algorithm {
	return r.Algorithm.Limiter(r.Capacity(), r.Limit, r.Window)
}

// RuleSet is an immutable, compiled set of rules for any number of domains,
// safe for concurrent use without locks.
type RuleSet struct {
	domains map[string]*node
	pools   map[string]map[string]*Rule // domain → name → the pool's rule
	// few holds the domains when there are at most 8: comparing a few short
	// strings is cheaper than hashing one.
	few   []domainNode
	rules []*Rule
	byID  map[string]*Rule
	// rlqs holds, per domain, how RLQS buckets become entries (rlqs.go)
	rlqs  map[string][]rlqsMapping
	files []string
	// hashedKeys holds, per domain, the keys some descriptor marks
	// hash_values (see HashedKeys).
	hashedKeys map[string]map[string]bool
	// staged maps a domain to the domain its staged rules are compiled
	// under (nil: no domain has any, the usual case); stagedNames holds
	// those domains.
	staged      map[string]string
	stagedNames map[string]bool
}

// IsStaged says whether domain holds staged rules: decided only beside
// its base domain's requests, never asked for by a client.
func (rs *RuleSet) IsStaged(domain string) bool {
	return rs != nil && rs.stagedNames != nil && rs.stagedNames[domain]
}

// BaseDomain is the domain whose staged rules domain holds, or domain
// itself.
func BaseDomain(domain string) string {
	if b, ok := strings.CutSuffix(domain, StagedSuffix); ok && b != "" {
		return b
	}
	return domain
}

// StagedSuffix ends the domain a staged version of a domain's rules is
// compiled under ("shop#staged"): the checker decides each request of
// the domain under it too, and throws the answer away.
const StagedSuffix = "#staged"

// Staged returns the domain domain's staged rules are compiled under, if
// it has some. It allocates nothing.
func (rs *RuleSet) Staged(domain string) (string, bool) {
	if rs == nil || rs.staged == nil {
		return "", false
	}
	s, ok := rs.staged[domain]
	return s, ok
}

// Domains returns the domain names, sorted.
func (rs *RuleSet) Domains() []string {
	out := make([]string, 0, len(rs.domains))
	for d := range rs.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// RuleByID returns the rule with the given id (not a pool's), or nil.
func (rs *RuleSet) RuleByID(id string) *Rule { return rs.byID[id] }

// Rules returns every rule, in file order.
func (rs *RuleSet) Rules() []*Rule { return rs.rules }

// Files returns the files the set was loaded from.
func (rs *RuleSet) Files() []string { return rs.files }

// Compile builds a RuleSet from parsed files, reporting duplicate domains
// and limits the algorithms cannot run with their positions.
func Compile(files []*File) (*RuleSet, error) {
	rs := &RuleSet{domains: map[string]*node{}}
	var errs ErrorList
	first := map[string]*File{}
	for _, f := range files {
		rs.files = append(rs.files, f.Path)
		if prev, dup := first[f.Domain]; dup {
			errs = append(errs, &Error{File: f.Path, Line: f.Pos.Line, Column: f.Pos.Column,
				Msg: fmt.Sprintf("domain %q is already defined in %s", f.Domain, prev.Path)})
			continue
		}
		first[f.Domain] = f
		root := &node{}
		rs.domains[f.Domain] = root
		for _, pl := range f.Pools {
			if rs.pools == nil {
				rs.pools = map[string]map[string]*Rule{}
			}
			if rs.pools[f.Domain] == nil {
				rs.pools[f.Domain] = map[string]*Rule{}
			}
			rs.pools[f.Domain][pl.Name] = newPoolRule(f.Domain, pl)
		}
		n := len(rs.rules)
		rs.build(root, f.Domain, nil, nil, nil, f.Descriptors, &errs)
		checkRLQS(f, &errs)
		if m := rlqsMappings(f); len(m) > 0 {
			if rs.rlqs == nil {
				rs.rlqs = map[string][]rlqsMapping{}
			}
			rs.rlqs[f.Domain] = m
		}
		for _, r := range rs.rules[n:] { // elastic rules: their pool, by name
			if r.Throttle.Type != ThrottleElastic {
				continue
			}
			r.Pool = rs.pools[f.Domain][r.Throttle.Pool]
			if r.Plans != nil { // its plans' rules were derived before the pool was known
				for _, pr := range r.Plans.Rules {
					pr.Pool = r.Pool
				}
			}
			if r.Pool == nil {
				errs = append(errs, posError(r.Pos, fmt.Sprintf("descriptor %q: throttle.pool %q is not a pool of domain %q (pools: %s)",
					r.Path[len(r.Path)-1].Key, r.Throttle.Pool, f.Domain, poolNames(rs.pools[f.Domain]))))
			}
		}
	}
	rs.byID = make(map[string]*Rule, len(rs.rules))
	for _, r := range rs.rules {
		// The id encoding is injective, so only a fault of ours could make
		// two rules share one; refuse it rather than let one rule's
		// counters, tickets and deliveries be the other's.
		if prev := rs.byID[r.ID]; prev != nil {
			errs = append(errs, posError(r.Pos, fmt.Sprintf("rule id %q is also the id of the rule at %s", r.ID, prev.Pos)))
			continue
		}
		rs.byID[r.ID] = r
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	for _, f := range files {
		base, ok := strings.CutSuffix(f.Domain, StagedSuffix)
		switch {
		case ok && !f.Staged:
			errs = append(errs, &Error{File: f.Path, Line: f.Pos.Line, Column: f.Pos.Column,
				Msg: fmt.Sprintf("domain %q ends with %q, which names a domain's staged rules (the rules store's staged versions)", f.Domain, StagedSuffix)})
		case ok && base != "":
			if rs.staged == nil {
				rs.staged = map[string]string{}
				rs.stagedNames = map[string]bool{}
			}
			rs.staged[base], rs.stagedNames[f.Domain] = f.Domain, true
			if rs.domains[base] == nil { // staged before any live rules: the domain is known, and limits nothing yet
				rs.domains[base] = &node{}
			}
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	if len(rs.domains) <= 8 {
		rs.few = make([]domainNode, 0, len(rs.domains))
		for name, root := range rs.domains {
			rs.few = append(rs.few, domainNode{name, root})
		}
	}
	return rs, nil
}

func posError(p Position, msg string) *Error {
	return &Error{File: p.File, Line: p.Line, Column: p.Column, Msg: msg}
}

func (rs *RuleSet) build(n *node, domain string, path []Entry, shared, hashed []bool, ds []*Descriptor, errs *ErrorList) {
	for _, d := range ds {
		e := Entry{d.Key, d.Value}
		p := append(slices.Clip(path), e)
		sh := append(slices.Clip(shared), d.ShareThreshold && strings.Contains(d.Value, "*"))
		hs := append(slices.Clip(hashed), d.HashValues)
		child := &node{}
		if n.keys == nil {
			n.keys = map[string]*keyNode{}
		}
		kn := n.keys[d.Key]
		if kn == nil {
			kn = &keyNode{}
			n.keys[d.Key] = kn
		}
		switch {
		case d.Value == "":
			kn.def = child
		case strings.Contains(d.Value, "*"):
			kn.wild = append(kn.wild, wildNode{d.Value, child})
		default:
			if kn.exact == nil {
				kn.exact = map[string]*node{}
			}
			kn.exact[d.Value] = child
		}
		if d.HashValues {
			if rs.hashedKeys == nil {
				rs.hashedKeys = map[string]map[string]bool{}
			}
			if rs.hashedKeys[domain] == nil {
				rs.hashedKeys[domain] = map[string]bool{}
			}
			rs.hashedKeys[domain][d.Key] = true
		}
		if d.RateLimit != nil {
			r := newRule(domain, p, sh, d)
			if slices.Contains(hs, true) {
				r.Hashed = hs
			}
			if len(r.ID) > MaxRuleIDBytes {
				*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: rule id (domain and descriptor path) is %d bytes, above %d", d.Key, len(r.ID), MaxRuleIDBytes)))
			}
			if r.Limiter != nil && r.Limit > 0 {
				if err := r.Limiter.Validate(); err != nil {
					*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: %v", d.Key, err)))
				}
			}
			if d.Plans != nil {
				compilePlans(r, d, hs, errs)
			}
			if len(d.Limits) > 1 {
				extraRules(r, d, errs)
			}
			child.rule = r
			rs.rules = append(rs.rules, r)
			rs.rules = append(rs.rules, r.Extra...)
		}
		rs.build(child, domain, p, sh, hs, d.Descriptors, errs)
	}
}

// MaxWindow is the longest window a rule may have: a year, the longest
// unit of a rule file. Envoy's unit_multiplier is held to it too, so that
// window arithmetic (start + window, in nanoseconds) never overflows.
const MaxWindow = 365 * 24 * time.Hour

func newRule(domain string, path []Entry, shared []bool, d *Descriptor) *Rule {
	id := AppendEscaped(make([]byte, 0, 64), domain)
	id = append(id, ':')
	for i, e := range path {
		if i > 0 {
			id = append(id, '/')
		}
		id = AppendEscaped(id, e.Key)
		if e.Value != "" {
			id = append(id, '=')
			id = AppendEscaped(id, e.Value)
		}
	}
	r := &Rule{
		ID: string(id), Domain: domain, Name: d.RateLimit.Name, Path: path,
		Shared: shared, Unlimited: d.RateLimit.Unlimited, Limit: d.RateLimit.RequestsPerUnit,
		Unit: d.RateLimit.Unit, Window: d.RateLimit.Unit.Duration(), Shadow: d.ShadowMode,
		DetailedMetric: d.DetailedMetric, Replaces: d.RateLimit.Replaces, Algorithm: d.Algorithm, Burst: d.Burst,
		Throttle: d.Throttle, OnExceed: or(d.OnExceed, ExceedDeny), Mode: or(d.Mode, ModeAsync),
		NearLimit: d.NearLimit, Failure: or(d.Failure, FailOpen), Shards: d.Shards, Pos: d.Pos,
	}
	if d.Defer != nil {
		r.Defer = *d.Defer
	}
	if cs := d.Concurrency; cs != nil { // leases in the store: a sync rule whose window is the lease TTL
		r.Algorithm, r.Mode, r.Window, r.Unit = AlgConcurrency, ModeSync, cs.LeaseTTL, 0
	}
	if r.Throttle.Type == "" {
		r.Throttle.Type = ThrottleHard
	}
	if r.Mode == ModeAsync && r.NearLimit == "" {
		r.NearLimit = NearSync
	}
	if r.Shards == 0 {
		r.Shards = 1
	}
	r.derive()
	if r.OnExceed == ExceedDefer && r.Defer.MaxQueued == 0 {
		r.Defer.MaxQueued = DefaultMaxQueued(r)
	}
	if !r.Unlimited && r.Limit > 0 {
		r.Limiter = r.buildLimiter()
	}
	return r
}

// poolKey is the entry key of a pool's counter and the kind of its
// [InternalRuleID].
const poolKey = "#pool"

// newPoolRule is the rule of a pool: a fixed window of the pool's limit
// over one counter of the domain, decided like any async rule.
func newPoolRule(domain string, pl *Pool) *Rule {
	path := []Entry{{Key: poolKey, Value: pl.Name}}
	r := &Rule{ID: InternalRuleID(domain, poolKey, pl.Name), Domain: domain, Name: pl.Name, Path: path, Limit: pl.RateLimit.RequestsPerUnit,
		Unit: pl.RateLimit.Unit, Window: pl.RateLimit.Unit.Duration(), Algorithm: AlgFixedWindow,
		Throttle: Throttle{Type: ThrottleHard}, OnExceed: ExceedDeny, Mode: ModeAsync, NearLimit: NearSync,
		Failure: FailOpen, Shards: 1, Pos: pl.Pos, IsPool: true}
	r.derive()
	r.Limiter = r.buildLimiter()
	return r
}

func poolNames(m map[string]*Rule) string {
	if len(m) == 0 {
		return "none"
	}
	names := slices.Sorted(maps.Keys(m))
	return strings.Join(names, ", ")
}

// Pool returns the pool name of domain, or nil.
func (rs *RuleSet) Pool(domain, name string) *Rule { return rs.pools[domain][name] }

// Pools returns every pool's rule, by domain and name.
func (rs *RuleSet) Pools() []*Rule {
	var out []*Rule
	for _, d := range slices.Sorted(maps.Keys(rs.pools)) {
		for _, n := range slices.Sorted(maps.Keys(rs.pools[d])) {
			out = append(out, rs.pools[d][n])
		}
	}
	return out
}

func or[T ~string](s, def T) T {
	if s == "" {
		return def
	}
	return s
}

// LoadRules reads and compiles the rule files and directories at paths.
//
// A fault in the parser or the compiler (a panic) is returned as an error
// naming the paths: a rule file must never take a running process down.
func LoadRules(paths ...string) (rs *RuleSet, err error) {
	defer func() {
		if p := recover(); p != nil {
			rs, err = nil, fmt.Errorf("config: internal error loading rules from %s: %v (please report it)", strings.Join(paths, ", "), p)
		}
	}()
	files, err := ReadRuleFiles(paths...)
	if err != nil {
		return nil, err
	}
	return Compile(files)
}

// OverrideRule is the rule of an Envoy per-descriptor limit override: the
// request names the limit, the descriptor's entries (every value) name the
// counter, with Envoy's semantics (fixed window aligned to the unit, every
// call charged, never shadowed). Its ID carries the limit and unit, so two
// overrides of one descriptor with different limits count separately, as
// in Envoy's service. limit 0 refuses everything, as in a rule file. A
// multiplier above 1 makes the window that many units long (Envoy's
// unit_multiplier: 30 × second is a 30-second window, aligned to 30 s).
// base, when not nil, is the rule the entries match in the domain: the
// override takes its metric label and its hash_values.
func OverrideRule(domain string, entries []Entry, limit int64, unit Unit, multiplier uint32, base *Rule) (*Rule, error) {
	if unit.Duration() <= 0 {
		return nil, fmt.Errorf("unit: unknown unit %d", int(unit))
	}
	if limit < 0 {
		return nil, fmt.Errorf("requests_per_unit: must be >= 0, got %d", limit)
	}
	if multiplier == 0 {
		multiplier = 1
	}
	if window := unit.Duration(); time.Duration(multiplier) > MaxWindow/window {
		return nil, fmt.Errorf("unit_multiplier: %d × %s is longer than the longest window a rule may have (%d days); at most %d", multiplier, unit, MaxWindow/(24*time.Hour), MaxWindow/window)
	}
	path := make([]Entry, len(entries))
	id := AppendEscaped(make([]byte, 0, 64), domain)
	id = append(id, ":"+overrideKind+":"...)
	for i, e := range entries {
		path[i] = Entry{Key: e.Key}
		if i > 0 {
			id = append(id, '/')
		}
		id = AppendEscaped(id, e.Key)
	}
	d := &Descriptor{RateLimit: &RateLimit{RequestsPerUnit: limit, Unit: unit}}
	r := newRule(domain, path, nil, d)
	r.Override, r.Base = true, base
	if base != nil && len(base.Hashed) == len(entries) {
		r.Hashed = base.Hashed
	}
	// The limit and the window end the id: digits and a unit name, after
	// the last unescaped '@' and '/', so no key can fake them.
	id = fmt.Appendf(id, "@%d/", limit)
	if multiplier > 1 {
		id = fmt.Appendf(id, "%d", multiplier)
		r.Window = unit.Duration() * time.Duration(multiplier)
		r.derive()
		if r.Limiter != nil {
			r.Limiter = r.buildLimiter()
		}
	}
	r.ID = string(append(id, unit.String()...))
	if r.Limiter != nil {
		if err := r.Limiter.Validate(); err != nil {
			return nil, fmt.Errorf("requests_per_unit: %w", err)
		}
	}
	return r, nil
}

// DropReplaced removes from rules (the rules a request's descriptors
// matched, in order; nil where none matched) every rule whose name another
// matched rule lists in its replaces, as Envoy's service does.
func DropReplaced(rules []*Rule) {
	var drop uint64 // bit j: drop rules[j]; a request has at most 32 descriptors
	for _, r := range rules {
		if r == nil || len(r.Replaces) == 0 {
			continue
		}
		for j, o := range rules {
			if j < 64 && o != nil && o.Name != "" && slices.Contains(r.Replaces, o.Name) {
				drop |= 1 << j
			}
		}
	}
	for j := range rules {
		if j < 64 && drop&(1<<j) != 0 {
			rules[j] = nil
		}
	}
}

// SameCounter reports whether entries a and b name the same counter of r:
// the same keys, and the same values except where r shares one counter
// among every value of a wildcard (share_threshold).
func SameCounter(a, b []Entry, r *Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || (a[i].Value != b[i].Value && !(i < len(r.Shared) && r.Shared[i])) {
			return false
		}
	}
	return true
}
