package controlset

import (
	"context"
	"hash/maphash"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/testrules"
)

// TestPoller: a Set is compiled when the store's controls change, when
// the rules are reloaded and when a control expires — not otherwise —
// and nil stands for no control in force.
func TestPoller(t *testing.T) {
	ctx := context.Background()
	rules := testrules.Store(t, rulesYAML)
	ms := counters.NewMemStore()
	p := NewPoller(ms, rules, maphash.MakeSeed())
	if (*Poller)(nil).Current() != nil {
		t.Fatal("a nil poller has controls")
	}
	const now = int64(1_000)
	if err := p.Sync(ctx, now); err != nil || p.Current() != nil {
		t.Fatalf("empty store: set %v, err %v", p.Current(), err)
	}
	es := []config.Entry{{Key: "tenant", Value: "a"}}
	rule := rules.Load().Match("shop", es)
	ct := counters.Control{ID: counters.ControlID("shop", es), Domain: "shop", Entries: es, Action: counters.ActionDeny,
		Rule: rule.ID, CreatedAt: now, ExpiresAt: now + 100}
	if err := ms.PutControl(ctx, ct); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name     string
		at       int64
		change   func()
		compiled bool // a new Set
		inForce  bool
	}{
		{"a control put", now + 1, nil, true, true},
		{"nothing changed", now + 2, nil, false, true},
		{"the rules reloaded", now + 3, func() { rules.Swap(testrules.Store(t, rulesYAML).Load()) }, true, true},
		{"the control expired", now + 100, nil, true, false},
	}
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		before := p.Current()
		if err := p.Sync(ctx, st.at); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		cur := p.Current()
		if compiled := cur != before; compiled != st.compiled {
			t.Errorf("%s: compiled %v, want %v", st.name, compiled, st.compiled)
		}
		if inForce := cur != nil && cur.Listed(st.at) > 0; inForce != st.inForce {
			t.Errorf("%s: in force %v, want %v", st.name, inForce, st.inForce)
		}
	}
}
