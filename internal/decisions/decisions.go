// Package decisions counts decisions per rule and outcome for metrics,
// off the checker's hot path: the API layers count the statuses they
// answer. Rules of the rule set are found by pointer (no allocation, no
// lock); overrides by their bounded series. Series are reported by
// [config.Rule.MetricID], so a reload (new pointers, same ids) keeps them
// monotonic, and whatever limits requests carry, the series stay bounded
// by the rule set: an override counts under its base rule's label with
// override="true".
package decisions

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Counter counts decisions per rule: allowed, denied, shadow-denied (a
// shadow rule that would have refused) and degraded (a failure policy
// decided). The API layers hand it every decision they answer (Observe).
// Safe for concurrent use; the zero value works but never forgets the
// rules of earlier rule sets (use New).
type Counter struct {
	rules sync.Map // *config.Rule of a rule set → *counts

	mu        sync.RWMutex
	overrides map[series]*counts            // override decisions (guarded by mu)
	retired   map[series]*[nOutcomes]uint64 // counts of rules no longer live (guarded by mu)
	live      func() *config.RuleSet        // set by New, read-only after
}

type counts struct {
	allowed, denied, shadowed, degraded, deferred, elastic, overSoft atomic.Uint64
}

// outcomes are the decision label's values, in counts' order; elastic and
// over_soft are allowed decisions (counted in allow too) that borrowed
// from a pool or went over a soft limit.
var outcomes = []string{"allow", "deny", "shadow_deny", "degraded", "defer", "elastic", "over_soft"}

const nOutcomes = 7

func (n *counts) observe(st *ratelimit.Status) {
	switch {
	case st.Code == ratelimit.OverLimit:
		n.denied.Add(1)
	case st.Code == ratelimit.Deferred:
		n.deferred.Add(1)
	case st.Shadowed:
		n.shadowed.Add(1)
	default:
		n.allowed.Add(1)
	}
	if st.Degraded {
		n.degraded.Add(1)
	}
	if st.Elastic {
		n.elastic.Add(1)
	}
	if st.OverSoft {
		n.overSoft.Add(1)
	}
}

func (n *counts) load() [nOutcomes]uint64 {
	return [nOutcomes]uint64{n.allowed.Load(), n.denied.Load(), n.shadowed.Load(), n.degraded.Load(), n.deferred.Load(),
		n.elastic.Load(), n.overSoft.Load()}
}

// New returns a Counter that, at each scrape, forgets the rules that are no
// longer in live() (reloads replace every rule pointer).
func New(live func() *config.RuleSet) *Counter { return &Counter{live: live} }

// Observe counts the statuses of one decision.
func (c *Counter) Observe(d *ratelimit.Decision) {
	for i := range d.Statuses {
		st := &d.Statuses[i]
		r := st.Rule
		if r == nil || r.Unlimited {
			continue
		}
		if r.Override {
			c.override(r).observe(st)
			continue
		}
		v, ok := c.rules.Load(r)
		if !ok {
			v, _ = c.rules.LoadOrStore(r, new(counts))
		}
		v.(*counts).observe(st)
	}
}

// override finds the counts of an override's series, creating them once.
func (c *Counter) override(r *config.Rule) *counts {
	k := seriesOf(r)
	c.mu.RLock()
	n := c.overrides[k]
	c.mu.RUnlock()
	if n != nil {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n = c.overrides[k]; n == nil {
		if c.overrides == nil {
			c.overrides = map[series]*counts{}
		}
		n = new(counts)
		c.overrides[k] = n
	}
	return n
}

type series struct {
	domain, rule, mode string
	override           bool
}

func seriesOf(r *config.Rule) series {
	return series{r.Domain, r.MetricID(), string(r.Mode), r.Override}
}

// prune folds the counts of rules that left the live rule set (after a
// reload) into their series' retired totals and forgets their pointers,
// so reloads do not grow the counter. An Observe racing with the fold may
// lose the one increment it was making on the retired pointer.
func (c *Counter) prune(rs *config.RuleSet) {
	live := map[*config.Rule]bool{}
	for _, r := range rs.Rules() {
		live[r] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rules.Range(func(k, v any) bool {
		r := k.(*config.Rule)
		if live[r] {
			return true
		}
		c.rules.Delete(r)
		if c.retired == nil {
			c.retired = map[series]*[nOutcomes]uint64{}
		}
		t := c.retired[seriesOf(r)]
		if t == nil {
			t = new([nOutcomes]uint64)
			c.retired[seriesOf(r)] = t
		}
		for i, x := range v.(*counts).load() {
			t[i] += x
		}
		return true
	})
}

// Samples reports velvetrope_decisions_total series: labels domain, rule,
// mode, override, decision (allow, deny, shadow_deny, degraded, defer,
// elastic, over_soft).
func (c *Counter) Samples() []metrics.Sample {
	if c.live != nil {
		c.prune(c.live())
	}
	sum := map[series]*[nOutcomes]uint64{}
	add := func(k series, v [nOutcomes]uint64) {
		t := sum[k]
		if t == nil {
			t = new([nOutcomes]uint64)
			sum[k] = t
		}
		for i := range v {
			t[i] += v[i]
		}
	}
	c.rules.Range(func(k, v any) bool {
		add(seriesOf(k.(*config.Rule)), v.(*counts).load())
		return true
	})
	c.mu.RLock()
	for k, n := range c.overrides {
		add(k, n.load())
	}
	for k, t := range c.retired {
		add(k, *t)
	}
	c.mu.RUnlock()
	keys := make([]series, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].rule != keys[j].rule {
			return keys[i].rule < keys[j].rule
		}
		return !keys[i].override && keys[j].override
	})
	var out []metrics.Sample
	for _, k := range keys {
		ov := "false"
		if k.override {
			ov = "true"
		}
		for i, name := range outcomes {
			out = append(out, metrics.Sample{Labels: []string{k.domain, k.rule, k.mode, ov, name}, Value: float64(sum[k][i])})
		}
	}
	return out
}

// Register exposes the counter as velvetrope_decisions_total.
func (c *Counter) Register(reg *metrics.Registry) {
	reg.Multi("velvetrope_decisions_total", "Descriptor decisions by domain, rule, mode and outcome (allow, deny, "+
		"shadow_deny: a shadow rule would have refused, degraded: a failure policy decided, defer: deferred to the queue, "+
		"elastic: allowed by borrowing from a pool, over_soft: allowed over a soft limit); override=\"true\" counts "+
		"per-request limit overrides under the rule their descriptor matches.", "counter",
		[]string{"domain", "rule", "mode", "override", "decision"}, c.Samples)
}
