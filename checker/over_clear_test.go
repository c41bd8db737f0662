package checker

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestRefreshShowingRoomEndsTheOverBand: the over band refuses from
// memory "until the window rolls or a refresh shows room"
// (docs/design.md). Here an operator resets the counter through another
// checker, which then spends all but 5: a's next refresh (within the
// minute's window) shows the 5, and a's refusal of 8 hits is a near-band
// decision again (a store charge), no longer the over band's.
func TestRefreshShowingRoomEndsTheOverBand(t *testing.T) {
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	rules := ruleStore(t, asyncRules)
	prod := &applyProducer{store: ms}
	cs := &countingStore{MemStore: ms}
	a, _ := New(Config{InstanceName: "a"}, rules, cs, prod, clk)
	b, _ := New(Config{InstanceName: "b"}, rules, ms, prod, clk)
	r := &rig{c: a, store: cs, prod: prod, clk: clk}
	ms1 := int64(time.Millisecond)

	// rule huge: 1000 a minute
	if band, d := bandOf(t, r, 1000, "huge", "x"); band != "near" || !d.Allowed() {
		t.Fatalf("1000 of 1000: %s, allowed %v", band, d.Allowed())
	}
	clk.ns.Add(ms1)
	bandOf(t, r, 1, "huge", "x") // refused: a now knows the key is over
	clk.ns.Add(ms1)
	if band, d := bandOf(t, r, 1, "huge", "x"); band != "over" || d.Allowed() {
		t.Fatalf("over the limit: %s, allowed %v; want over", band, d.Allowed())
	}

	es := []config.Entry{{Key: "huge", Value: "x"}}
	resetCounter(t, b, es)
	var d ratelimit.Decision
	if err := b.Check(context.Background(), req(995, "huge", "x"), &d); err != nil || !d.Allowed() {
		t.Fatalf("b after the reset: %v %v", d.Code, err)
	}
	reads := cs.reads.Load()
	for cs.reads.Load() == reads && clk.Now() < t0+int64(10*time.Second) { // a's key comes due
		clk.ns.Add(10 * ms1)
		a.Refresh(context.Background())
	}
	if cs.reads.Load() == reads {
		t.Fatal("a did not refresh the key within 10 s")
	}
	band, d := bandOf(t, r, 8, "huge", "x")
	if band != "near" || d.Allowed() {
		t.Fatalf("8 hits with 5 left after a refresh: %s, allowed %v; want a near-band refusal", band, d.Allowed())
	}
	if band, d := bandOf(t, r, 5, "huge", "x"); !d.Allowed() {
		t.Fatalf("5 hits with 5 left: %s, refused", band)
	}
}
