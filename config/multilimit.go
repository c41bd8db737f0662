package config

// Several limits on one descriptor (docs/rules.md, "Several limits on one
// descriptor"): `limits:` in place of `rate_limit:`, e.g. 10 a second and
// 10,000 a day on api_key. The first limit is the descriptor's rule, with
// the id a single rate_limit would have (so adding a limit to a rule keeps
// its counters); each further limit is a rule of its own, with an id of
// its own and so counters of their own, decided beside it as if the
// request carried the descriptor once per limit.

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxLimitsPerDescriptor bounds a limits list.
const MaxLimitsPerDescriptor = 4

// limitsKind is the kind part of a further limit's id: the rule's id,
// ":#limit:" and its unit ("api:api_key:#limit:day"). An unescaped ':'
// never appears inside a path, so no path's rule can have it.
const limitsKind = "#limit"

// limits reads a descriptor's limits list.
func (p *parser) limits(n *yaml.Node) []*RateLimit {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "limits: want a list of {unit, requests_per_unit}, got %s", p.kindName(n))
		return nil
	}
	var out []*RateLimit
	seen := map[Unit]int{}
	for _, item := range n.Content {
		item = resolve(item)
		rl := &RateLimit{}
		var unitNode, rpuNode *yaml.Node
		ok := p.fields(item, "limits", []string{"unit", "requests_per_unit"}, func(key string, _, v *yaml.Node) {
			switch key {
			case "unit":
				unitNode = v
				if u, ok := unitNames[strings.ToLower(p.str(v, "limits.unit"))]; ok {
					rl.Unit = u
				} else {
					p.errorf(v, "limits.unit: unknown unit %q (want second, minute, hour, day, week, month or year)", v.Value)
				}
			case "requests_per_unit":
				rpuNode, rl.RequestsPerUnit = v, p.integer(v, "limits.requests_per_unit")
			}
		})
		switch {
		case !ok:
			continue
		case unitNode == nil:
			p.errorf(item, "limits: missing unit")
			continue
		case rpuNode == nil:
			p.errorf(item, "limits: missing requests_per_unit")
			continue
		case rl.RequestsPerUnit == 0 && p.isInt(rpuNode):
			p.errorf(rpuNode, "limits.requests_per_unit: must be at least 1, got 0 (a limit of 0 refuses everything: one rate_limit says that)")
			continue
		case rl.RequestsPerUnit < 0:
			p.errorf(rpuNode, "limits.requests_per_unit: must be at least 1, got %s", rpuNode.Value)
			continue
		case rl.RequestsPerUnit == 0:
			continue // not an integer: reported
		}
		if line, dup := seen[rl.Unit]; dup && rl.Unit != 0 {
			p.errorf(unitNode, "limits: a second limit per %s (the first at line %d): one limit per unit", rl.Unit, line)
			continue
		}
		seen[rl.Unit] = unitNode.Line
		out = append(out, rl)
	}
	switch {
	case len(n.Content) < 2:
		p.errorf(n, "limits: want at least 2 limits (one is a rate_limit)")
	case len(n.Content) > MaxLimitsPerDescriptor:
		p.errorf(n, "limits: %d limits, at most %d", len(n.Content), MaxLimitsPerDescriptor)
	}
	return out
}

// checkLimits reports what a limits list does not combine with.
func (p *parser) checkLimits(n *yaml.Node, d *Descriptor) {
	if d.Limits == nil {
		return
	}
	why := ""
	switch {
	case d.RateLimit != nil:
		why = "rate_limit and limits: give one (limits holds every limit)"
	case d.Plans != nil:
		why = "limits and plans do not combine (a plan is one limit)"
	case d.OnExceed == ExceedDefer:
		why = "limits and on_exceed defer do not combine (a request refused by one limit would wait for which?)"
	case d.Throttle.Type == ThrottleElastic:
		why = "limits and elastic throttling do not combine"
	case d.Mode == ModeLocal:
		why = "limits need mode async or sync (shared counters)"
	}
	if why != "" {
		p.errorf(n, "descriptor %q: %s", d.Key, why)
	}
}

// extraRules derives a limits descriptor's further limits from its rule
// (the first limit).
func extraRules(r *Rule, d *Descriptor, errs *ErrorList) {
	for _, rl := range d.Limits[1:] {
		x := *r
		x.ID = r.ID + ":" + limitsKind + ":" + rl.Unit.String()
		x.Name, x.Replaces, x.Extra, x.Limiter = "", nil, nil, nil
		x.Limit, x.Unit, x.Window = rl.RequestsPerUnit, rl.Unit, rl.Unit.Duration()
		if x.Burst > 0 {
			x.Burst = max(1, r.Burst*x.Limit/max(r.Limit, 1))
		}
		x.derive()
		if x.OnExceed == ExceedDefer && x.Defer.MaxQueued == 0 {
			x.Defer.MaxQueued = DefaultMaxQueued(&x)
		}
		if err := CheckRequestsPerUnit(x.Throttle.Type, x.Limit); err != nil {
			*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: limits: per %s: %v", d.Key, rl.Unit, err)))
			continue
		}
		x.Limiter = x.buildLimiter()
		if err := x.Limiter.Validate(); err != nil {
			*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: limits: per %s: %v", d.Key, rl.Unit, err)))
			continue
		}
		r.Extra = append(r.Extra, &x)
	}
}

// isInt says whether n is an integer the parser reads.
func (p *parser) isInt(n *yaml.Node) bool {
	var v int64
	return n.Kind == yaml.ScalarNode && n.Tag == "!!int" && n.Decode(&v) == nil
}
