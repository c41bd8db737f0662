package config

// The parsing of what velvetrope adds to Envoy's rule format: capacity
// pools, throttles and defer blocks (docs/rules.md).

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// targetProblem says what keeps s from being a defer target, or "": an
// absolute http or https URL with a host, the base every payload path is
// joined to, so nothing in it that joining would drop, send or resolve
// elsewhere (a query, a fragment, credentials, dot segments).
func targetProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "the scheme must be http or https"
	case u.Host == "":
		return "no host"
	case u.User != nil:
		return "credentials in the URL (user:password@) are refused: the drain would not send them"
	case u.RawQuery != "" || u.ForceQuery:
		return "a query would be dropped when the payload's path is joined"
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "a fragment is never sent"
	}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if d, err := url.PathUnescape(seg); err == nil && (d == "." || d == "..") || strings.EqualFold(seg, "%2e") || strings.EqualFold(seg, "%2e%2e") {
			return "dot segments in the path"
		}
	}
	return ""
}

// pools reads a file's capacity pools: a name and a rate limit each.
func (p *parser) pools(n *yaml.Node) []*Pool {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "pools: want a list of {name, rate_limit}, got %s", p.kindName(n))
		return nil
	}
	var out []*Pool
	seen := map[string]int{}
	for _, item := range n.Content {
		item = resolve(item)
		pl := &Pool{Pos: p.pos(item)}
		p.fields(item, "pool", []string{"name", "rate_limit"}, func(key string, _, v *yaml.Node) {
			switch key {
			case "name":
				pl.Name = p.str(v, "pools.name")
			case "rate_limit":
				pl.RateLimit = p.rateLimit(v)
			}
		})
		switch {
		case item.Kind != yaml.MappingNode:
			continue
		case pl.Name == "":
			p.errorf(item, "pool: missing name")
			continue
		case pl.RateLimit == nil:
			p.errorf(item, "pool %q: missing rate_limit", pl.Name)
			continue
		case pl.RateLimit.Unlimited:
			p.errorf(item, "pool %q: a pool is a capacity: it cannot be unlimited", pl.Name)
			continue
		}
		if err := CheckPoolCapacity(pl.RateLimit.RequestsPerUnit); err != nil {
			p.errorf(item, "pool %q: a pool is a capacity: requests_per_unit: %v", pl.Name, err)
			continue
		}
		if line, dup := seen[pl.Name]; dup {
			p.errorf(item, "duplicate pool %q: already defined at line %d", pl.Name, line)
			continue
		}
		seen[pl.Name] = pl.Pos.Line
		out = append(out, pl)
	}
	return out
}

// checkPools reports elastic descriptors naming a pool the file does not
// define.
func (p *parser) checkPools(f *File, ds []*Descriptor) {
	for _, d := range ds {
		if d.Throttle.Type == ThrottleElastic && d.Throttle.Pool != "" {
			found := false
			var names []string
			for _, pl := range f.Pools {
				found = found || pl.Name == d.Throttle.Pool
				names = append(names, pl.Name)
			}
			if !found {
				list := "none"
				if len(names) > 0 {
					list = strings.Join(names, ", ")
				}
				p.errs = append(p.errs, &Error{File: p.path, Line: d.Pos.Line, Column: d.Pos.Column,
					Msg: fmt.Sprintf("descriptor %s: throttle.pool %s is not a pool of domain %s (pools: %s)", p.quote(d.Key), p.quote(d.Throttle.Pool), p.quote(f.Domain), p.clip(list))})
			}
		}
		p.checkPools(f, d.Descriptors)
	}
}

// deferSpec reads a descriptor's defer block.
func (p *parser) deferSpec(n *yaml.Node) *DeferSpec {
	ds := &DeferSpec{MaxAge: DefaultDeferMaxAge, MaxAttempts: DefaultDeferMaxAttempts, MaxPayloadBytes: DefaultDeferPayloadBytes}
	p.fields(n, "defer", []string{"target", "max_age", "max_attempts", "max_payload_bytes", "max_queued"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "target":
			ds.Target = p.str(v, "defer.target")
			if why := targetProblem(ds.Target); why != "" {
				p.errorf(v, "defer.target: want an absolute http or https base URL, got %q: %s", ds.Target, why)
			}
		case "max_age":
			d, err := time.ParseDuration(p.str(v, "defer.max_age"))
			if err != nil || d <= 0 || d > 7*24*time.Hour {
				p.errorf(v, "defer.max_age: want a duration from 1s to 168h, got %q", v.Value)
			}
			ds.MaxAge = d
		case "max_attempts":
			if a, ok := p.integerOK(v, "defer.max_attempts"); ok && (a < 1 || a > 100) {
				p.errorf(v, "defer.max_attempts: must be between 1 and 100, got %s", v.Value)
			} else if ok {
				ds.MaxAttempts = int(a)
			}
		case "max_payload_bytes":
			if b, ok := p.integerOK(v, "defer.max_payload_bytes"); ok && (b < 1 || b > MaxDeferPayloadBytes) {
				p.errorf(v, "defer.max_payload_bytes: must be between 1 and %d, got %s", MaxDeferPayloadBytes, v.Value)
			} else if ok {
				ds.MaxPayloadBytes = b
			}
		case "max_queued":
			if q, ok := p.integerOK(v, "defer.max_queued"); ok && (q < 1 || q > MaxDeferQueued) {
				p.errorf(v, "defer.max_queued: must be between 1 and %d, got %s", MaxDeferQueued, v.Value)
			} else if ok {
				ds.MaxQueued = q
			}
		}
	})
	return ds
}

func (p *parser) throttle(n *yaml.Node, t *Throttle) {
	var overage, pool, mult *yaml.Node
	p.fields(n, "throttle", []string{"type", "overage_percent", "pool", "max_multiplier"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "type":
			t.Type = ThrottleType(p.enum(v, "throttle.type", []string{string(ThrottleHard), string(ThrottleSoft), string(ThrottleElastic)}))
		case "overage_percent":
			overage, t.OveragePercent = v, p.integer(v, "throttle.overage_percent")
		case "pool":
			pool, t.Pool = v, p.str(v, "throttle.pool")
		case "max_multiplier":
			mult, t.MaxMultiplier = v, p.integer(v, "throttle.max_multiplier")
		}
	})
	if n.Kind != yaml.MappingNode {
		return
	}
	switch t.Type {
	case "", ThrottleHard:
		for _, x := range []*yaml.Node{overage, pool, mult} {
			if x != nil {
				p.errorf(x, "throttle: overage_percent, pool and max_multiplier need type soft or elastic")
				break
			}
		}
	case ThrottleSoft:
		if overage == nil || t.OveragePercent <= 0 || t.OveragePercent > MaxOveragePercent {
			p.errorf(n, "throttle: type soft needs overage_percent between 1 and %d", MaxOveragePercent)
		}
		if pool != nil || mult != nil {
			p.errorf(n, "throttle: pool and max_multiplier belong to type elastic")
		}
	case ThrottleElastic:
		if t.Pool == "" {
			p.errorf(n, "throttle: type elastic needs a pool")
		}
		if mult == nil {
			t.MaxMultiplier = DefaultMaxMultiplier
		} else if t.MaxMultiplier < MinMaxMultiplier || t.MaxMultiplier > MaxMaxMultiplier {
			p.errorf(mult, "throttle.max_multiplier: must be between %d and %d, got %d", MinMaxMultiplier, MaxMaxMultiplier, t.MaxMultiplier)
		}
		if overage != nil {
			p.errorf(overage, "throttle: overage_percent belongs to type soft")
		}
	}
}
