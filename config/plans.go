package config

// Per-client limits (docs/rules.md, "Per-client limits"): a rule names a
// table of the rules store that gives each client a plan, and the limit
// each plan has under this rule. The table holds only client → plan
// name, so a client's change needs no rule compiled; a plan's limit is a
// rule of its own, derived here once, so the request path only swaps one
// compiled rule for another.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// PlansSpec is a descriptor's plans block as written.
type PlansSpec struct {
	// Table is the rules store's table that maps clients to plan names.
	Table string
	// Limits are the plans' limits under this rule, in file order.
	Limits []PlanLimit
	Pos    Position
}

// PlanLimit is one plan's requests_per_unit.
type PlanLimit struct {
	Name  string
	Limit int64
	Pos   Position
}

// Plans is a compiled plans block: what the request path needs to give a
// client its plan's rule.
type Plans struct {
	// Table names the client → plan table, within the rule's domain.
	Table string
	// Client holds the indexes of the rule's path entries whose request
	// values name the client, in path order: the entries without a fixed
	// value (a key alone, or a wildcard value).
	Client []int
	// Rules maps a plan's name to the rule at its limit: the same id and
	// counters as the rule, only the limit (and a scaled burst) differ. A
	// plan the rule does not name is decided by the rule's own limit.
	Rules map[string]*Rule
}

// Bounds of a plans block.
const (
	// MaxPlanNameBytes bounds a table's and a plan's name.
	MaxPlanNameBytes = 64
	// MaxPlansPerTable bounds the distinct plan names one table holds and
	// the plans one rule lists.
	MaxPlansPerTable = 1000
	// MaxClientValues bounds the values that name one client.
	MaxClientValues = 8
)

// CheckPlanName returns an error unless s is a table's or a plan's name:
// 1 to 64 of a-z, 0-9, '_' and '-'. Names go into store keys, URLs and
// metrics as they are.
func CheckPlanName(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > MaxPlanNameBytes {
		return fmt.Errorf("is %d bytes, more than %d", len(s), MaxPlanNameBytes)
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%s holds %s at offset %d (want a-z, 0-9, '_' and '-')", strconv.Quote(clip(s)), strconv.QuoteRune(c), i)
		}
	}
	return nil
}

// plansSpec reads a descriptor's plans block.
func (p *parser) plansSpec(n *yaml.Node) *PlansSpec {
	ps := &PlansSpec{Pos: p.pos(n)}
	var limits *yaml.Node
	ok := p.fields(n, "plans", []string{"table", "limits"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "table":
			ps.Table = p.str(v, "plans.table")
			if err := CheckPlanName(ps.Table); err != nil && ps.Table != "" {
				p.errorf(v, "plans.table: %v", err)
			}
		case "limits":
			limits = v
		}
	})
	if !ok {
		return nil
	}
	if ps.Table == "" {
		p.errorf(n, "plans: missing table (the rules store's table of clients and their plans)")
	}
	if limits == nil {
		p.errorf(n, "plans: missing limits (each plan's requests_per_unit, e.g. {pro: 100})")
		return ps
	}
	if limits.Kind != yaml.MappingNode {
		p.errorf(limits, "plans.limits: want a mapping of plan name to requests_per_unit, got %s", p.kindName(limits))
		return ps
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(limits.Content); i += 2 {
		k, v := limits.Content[i], resolve(limits.Content[i+1])
		name := p.text(k)
		if err := CheckPlanName(name); err != nil {
			p.errorf(k, "plans.limits: plan name %v", err)
			continue
		}
		if line, dup := seen[name]; dup {
			p.errorf(k, "plans.limits: duplicate plan %q (first at line %d)", name, line)
			continue
		}
		seen[name] = k.Line
		lim, ok := p.integerOK(v, "plans.limits."+name)
		if !ok {
			continue
		}
		if lim < 0 {
			p.errorf(v, "plans.limits.%s: must not be negative, got %s", name, v.Value)
			continue
		}
		ps.Limits = append(ps.Limits, PlanLimit{Name: name, Limit: lim, Pos: p.pos(v)})
	}
	if len(ps.Limits) > MaxPlansPerTable {
		p.errorf(limits, "plans.limits: %d plans, more than %d", len(ps.Limits), MaxPlansPerTable)
	}
	if len(ps.Limits) == 0 && len(limits.Content) == 0 {
		p.errorf(limits, "plans.limits: no plans")
	}
	return ps
}

// checkPlans reports a plans block on a descriptor it cannot apply to.
func (p *parser) checkPlans(n *yaml.Node, d *Descriptor) {
	switch {
	case d.Plans == nil:
	case d.RateLimit == nil:
		p.errorf(n, "descriptor %q: plans need a rate_limit (the limit of clients without a plan)", d.Key)
	case d.RateLimit.Unlimited:
		p.errorf(n, "descriptor %q: an unlimited rate_limit takes no plans", d.Key)
	case d.ShareThreshold:
		p.errorf(n, "descriptor %q: plans and share_threshold do not combine (every value shares one counter: there is no client to give a plan)", d.Key)
	}
	if d.Plans == nil || d.RateLimit == nil {
		return
	}
	t := d.Throttle.Type
	if t == "" {
		t = ThrottleHard
	}
	for _, pl := range d.Plans.Limits {
		if err := CheckRequestsPerUnit(t, pl.Limit); err != nil {
			p.errs = append(p.errs, posError(pl.Pos, fmt.Sprintf("descriptor %q: plans.limits.%s: %v", d.Key, pl.Name, err)))
		}
		if pl.Limit > 1<<20 && d.Algorithm == AlgSlidingLog {
			p.errs = append(p.errs, posError(pl.Pos, fmt.Sprintf("descriptor %q: plans.limits.%s: sliding_log keeps one entry per request: at most 1048576, got %d", d.Key, pl.Name, pl.Limit)))
		}
	}
}

// compilePlans derives a plans rule's per-plan rules; the path must give
// the client a name (an entry without a fixed value) the checker can read
// as the request sent it.
func compilePlans(r *Rule, d *Descriptor, hashed []bool, errs *ErrorList) {
	var client []int
	for i, e := range r.Path {
		if e.Value == "" || strings.Contains(e.Value, "*") { // every value its own counter
			client = append(client, i)
		}
	}
	switch {
	case len(client) == 0:
		*errs = append(*errs, posError(d.Plans.Pos, fmt.Sprintf("descriptor %q: plans need a client: an entry of the rule's path without a value (here every entry has a fixed value)", d.Key)))
		return
	case len(client) > MaxClientValues:
		*errs = append(*errs, posError(d.Plans.Pos, fmt.Sprintf("descriptor %q: plans name a client by at most %d values; this path has %d entries without a fixed value", d.Key, MaxClientValues, len(client))))
		return
	case slices.Contains(hashed, true):
		*errs = append(*errs, posError(d.Plans.Pos, fmt.Sprintf("descriptor %q: plans and hash_values do not combine (clients are looked up by the values hash_values hides)", d.Key)))
		return
	case slices.Contains(r.Shared, true):
		*errs = append(*errs, posError(d.Plans.Pos, fmt.Sprintf("descriptor %q: plans under a share_threshold entry do not combine (its values share counters)", d.Key)))
		return
	}
	pl := &Plans{Table: d.Plans.Table, Client: client, Rules: make(map[string]*Rule, len(d.Plans.Limits))}
	for _, l := range d.Plans.Limits {
		v, err := r.WithLimit(l.Limit)
		if err == nil && v.Limiter != nil {
			err = v.Limiter.Validate()
		}
		if err != nil {
			*errs = append(*errs, posError(l.Pos, fmt.Sprintf("descriptor %q: plans.limits.%s: %v", d.Key, l.Name, err)))
			continue
		}
		pl.Rules[l.Name] = v
	}
	r.Plans = pl
}

// PlanTable is a table some rule of a rule set reads clients' plans from.
type PlanTable struct{ Domain, Table string }

// PlanTables returns the tables the set's rules read, sorted.
func (rs *RuleSet) PlanTables() []PlanTable {
	seen := map[PlanTable]bool{}
	var out []PlanTable
	for _, r := range rs.rules {
		if r.Plans == nil {
			continue
		}
		t := PlanTable{BaseDomain(r.Domain), r.Plans.Table} // staged rules read the domain's table
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b PlanTable) int {
		if a.Domain != b.Domain {
			return strings.Compare(a.Domain, b.Domain)
		}
		return strings.Compare(a.Table, b.Table)
	})
	return out
}
