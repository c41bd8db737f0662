// Package decisions counts decisions per rule and outcome for metrics,
// off the checker's hot path: the API layers count the statuses they
// answer. Counters are found by the rule's pointer (no allocation) and
// reported by rule id, so a reload (new pointers, same ids) keeps the
// series monotonic.
package decisions

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/metrics"
)

// Counter counts decisions per rule: allowed, denied, shadow-denied (a
// shadow rule that would have refused) and degraded (a failure policy
// decided).
type Counter struct {
	rules sync.Map // *config.Rule → *counts
}

type counts struct {
	allowed, denied, shadowed, degraded atomic.Uint64
}

// Observe counts the statuses of one decision.
func (c *Counter) Observe(d *checker.Decision) {
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if st.Rule == nil || st.Rule.Unlimited {
			continue
		}
		v, ok := c.rules.Load(st.Rule)
		if !ok {
			v, _ = c.rules.LoadOrStore(st.Rule, new(counts))
		}
		n := v.(*counts)
		switch {
		case st.Code == checker.OverLimit:
			n.denied.Add(1)
		case st.Shadowed:
			n.shadowed.Add(1)
		default:
			n.allowed.Add(1)
		}
		if st.Degraded {
			n.degraded.Add(1)
		}
	}
}

type series struct{ domain, rule, mode string }

// Samples reports velvetrope_decisions_total series: labels domain, rule,
// mode, decision (allow, deny, shadow_deny, degraded).
func (c *Counter) Samples() []metrics.Sample {
	sum := map[series]*[4]uint64{}
	c.rules.Range(func(k, v any) bool {
		r, n := k.(*config.Rule), v.(*counts)
		key := series{r.Domain, r.ID, r.Mode}
		t := sum[key]
		if t == nil {
			t = new([4]uint64)
			sum[key] = t
		}
		t[0] += n.allowed.Load()
		t[1] += n.denied.Load()
		t[2] += n.shadowed.Load()
		t[3] += n.degraded.Load()
		return true
	})
	keys := make([]series, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].rule < keys[j].rule })
	var out []metrics.Sample
	for _, k := range keys {
		for i, name := range []string{"allow", "deny", "shadow_deny", "degraded"} {
			out = append(out, metrics.Sample{Labels: []string{k.domain, k.rule, k.mode, name}, Value: float64(sum[k][i])})
		}
	}
	return out
}

// Register exposes the counter as velvetrope_decisions_total.
func (c *Counter) Register(reg *metrics.Registry) {
	reg.Multi("velvetrope_decisions_total", "Descriptor decisions by domain, rule, mode and outcome (allow, deny, "+
		"shadow_deny: a shadow rule would have refused, degraded: a failure policy decided).", "counter",
		[]string{"domain", "rule", "mode", "decision"}, c.Samples)
}

// Checker is what Wrap wraps: *checker.Checker and *checker.Local.
type Checker interface {
	Check(ctx context.Context, req *checker.Request, d *checker.Decision) error
	Rules() *config.RuleSet
}

// Wrap returns c counting every decision it makes in n.
func Wrap(c Checker, n *Counter) Checker { return observed{c, n} }

type observed struct {
	Checker
	n *Counter
}

func (o observed) Check(ctx context.Context, req *checker.Request, d *checker.Decision) error {
	err := o.Checker.Check(ctx, req, d)
	if err == nil {
		o.n.Observe(d)
	}
	return err
}
