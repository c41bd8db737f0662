package plantable

import (
	"sync"
	"sync/atomic"

	"github.com/velvetrope/velvetrope/config"
)

// Tables is the client tables a checker follows, by domain and table
// name, and gives a plans rule's client the rule of its plan. Safe for
// concurrent use; Resolve takes no lock.
type Tables struct {
	mu   sync.Mutex
	list atomic.Pointer[[]named]
}

type named struct {
	domain, table string
	t             *Table
}

// Set makes t the domain's table of that name (nil: none).
func (ts *Tables) Set(domain, table string, t *Table) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var next []named
	if cur := ts.list.Load(); cur != nil {
		for _, n := range *cur {
			if n.domain != domain || n.table != table {
				next = append(next, n)
			}
		}
	}
	if t != nil {
		next = append(next, named{domain, table, t})
	}
	ts.list.Store(&next)
}

// Get returns the domain's table of that name, or nil.
func (ts *Tables) Get(domain, table string) *Table {
	if ts == nil {
		return nil
	}
	cur := ts.list.Load()
	if cur == nil {
		return nil
	}
	for i := range *cur {
		if n := &(*cur)[i]; n.table == table && n.domain == domain {
			return n.t
		}
	}
	return nil
}

// Resolve returns the rule that decides the client of descriptor es
// under r, a rule with plans: the rule of the client's plan, or r itself
// for a client without one (or with a plan r does not name, or while the
// table is not loaded). It allocates nothing.
func (ts *Tables) Resolve(r *config.Rule, es []config.Entry) *config.Rule {
	t := ts.Get(config.BaseDomain(r.Domain), r.Plans.Table) // a staged rule reads its domain's table
	if t == nil {
		return r
	}
	h := t.Start()
	for _, i := range r.Plans.Client {
		if i >= len(es) {
			return r
		}
		h = t.Add(h, es[i].Value)
	}
	name, ok := t.Plan(Finish(h))
	if !ok {
		return r
	}
	if pr := r.Plans.Rules[name]; pr != nil {
		return pr
	}
	return r
}
