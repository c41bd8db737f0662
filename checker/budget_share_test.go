package checker

import (
	"context"
	"testing"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestLocalBudgetIsThisInstancesShare: with the store down, `failure:
// local_budget` admits this instance's share of what remained at the last
// answer — what remained divided by the instances the store has seen —
// not all of it (each instance admitting all of it overshoots by the
// fleet's size).
func TestLocalBudgetIsThisInstancesShare(t *testing.T) {
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	rules := ruleStore(t, asyncRules)
	prod := &applyProducer{store: ms}
	a, _ := New(Config{InstanceName: "a"}, rules, ms, prod, clk)
	b, _ := New(Config{InstanceName: "b"}, rules, ms, prod, clk)
	check := func(c *Checker) bool {
		t.Helper()
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(1, "budget", "x"), &d); err != nil {
			t.Fatal(err)
		}
		return d.Allowed()
	}
	// limit 8: b takes 1, then a (the store's answer: 6 remain, 2 instances)
	if !check(b) || !check(a) {
		t.Fatal("refused with the store up")
	}
	ms.SetUnavailable(true)
	admitted := 0
	for range 10 {
		if check(a) {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("store down: a admitted %d, want its share 6 / 2 = 3", admitted)
	}
}
