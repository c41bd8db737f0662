package checker

import (
	"context"
	"testing"
	"time"
)

// TestEmissionInProportionToNeed: a key far from its limit holds its
// consumption up to MaxEmitInterval (one delta for a second of decisions
// instead of one per flush); a key whose held consumption could matter to
// another instance's band goes at the next flush; Flush emits everything.
func TestEmissionInProportionToNeed(t *testing.T) {
	r := newRig(t, Config{})
	ctx := context.Background()
	ms := int64(time.Millisecond)
	// in use past the young-key period, with store answers: far
	for range 10 {
		r.check(t, 1, "huge", "far")
		r.clk.ns.Add(50 * ms)
		r.c.Refresh(ctx)
	}
	r.c.Flush(ctx)
	before := len(r.prod.all)
	for step := range 19 { // 19 flush intervals of decisions: nothing is due
		r.clk.ns.Add(50 * ms)
		if d := r.check(t, 1, "huge", "far"); !d.Allowed() {
			t.Fatalf("step %d: refused far from the limit", step)
		}
		if err := r.c.flush(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.prod.all) - before; n != 0 {
		t.Fatalf("a far key emitted %d deltas within MaxEmitInterval, want 0 (then 1)", n)
	}
	if keys, lazy, _ := r.c.Queue(); keys != 1 || lazy != 1 {
		t.Fatalf("queue: %d keys, %d lazy; want 1 and 1", keys, lazy)
	}
	r.clk.ns.Add(100 * ms)
	r.c.flush(ctx, false)
	if n := len(r.prod.all) - before; n != 1 || r.prod.all[before].CountedCost != 19 || r.prod.all[before].AlreadyApplied {
		t.Fatalf("after MaxEmitInterval: %d deltas (%v), want one of 19 hits decided in memory", n, r.prod.all[before:])
	}
	// a key decided into its near band goes at once (its charges already
	// folded everything into the store); a key whose held hits exceed
	// the allowance goes at the next flush
	before = len(r.prod.all)
	r.clk.ns.Add(10 * ms)
	r.check(t, 950, "huge", "far") // 950 of 1000 in one decision: too much to hold
	r.c.flush(ctx, false)
	if n := len(r.prod.all) - before; n != 1 {
		t.Fatalf("a decision that leaves the far band: %d deltas at the next flush, want 1", n)
	}
	// Flush emits lazy keys too
	r.clk.ns.Add(10 * ms)
	r.check(t, 0, "huge", "probe") // a probe: analytics only, lazy
	before = len(r.prod.all)
	r.c.Flush(ctx)
	if n := len(r.prod.all) - before; n != 1 {
		t.Fatalf("Flush emitted %d deltas, want the lazy one", n)
	}
	if keys, lazy, _ := r.c.Queue(); keys != 0 || lazy != 0 {
		t.Fatalf("after Flush: %d keys, %d lazy queued", keys, lazy)
	}
}

// TestIdleKeysAreParked: a key decided once (a per-IP front's usual key)
// costs its one store charge and no refresh reads afterwards, window after
// window; used again, its stale view makes that decision a store charge.
func TestIdleKeysAreParked(t *testing.T) {
	r := newRig(t, Config{})
	ctx := context.Background()
	ms := int64(time.Millisecond)
	r.check(t, 1, "big", "once")
	if got := r.store.charges.Load(); got != 1 {
		t.Fatalf("first decision: %d charges, want 1", got)
	}
	reads := r.store.reads.Load()
	for range 60 { // 3 s of refresher passes over per-second windows
		r.clk.ns.Add(50 * ms)
		r.c.Refresh(ctx)
	}
	if got := r.store.reads.Load() - reads; got != 0 {
		t.Fatalf("an idle key was read %d times", got)
	}
	// used again: near (a charge), then the refresher reads it as usual
	r.check(t, 1, "big", "once")
	if got := r.store.charges.Load(); got != 2 {
		t.Fatalf("decision on a parked key: %d charges in all, want 2", got)
	}
	for range 4 {
		r.clk.ns.Add(50 * ms)
		r.check(t, 1, "big", "once")
		r.c.Refresh(ctx)
	}
	if got := r.store.reads.Load() - reads; got == 0 {
		t.Fatal("a key in use again is not refreshed")
	}
	// past idle_after it is dropped
	r.clk.ns.Add(int64(3 * time.Minute))
	r.c.Flush(ctx)
	r.c.Refresh(ctx)
	r.clk.ns.Add(int64(3 * time.Minute))
	r.c.Refresh(ctx)
	if n := r.c.Snapshot().Keys; n != 0 {
		t.Fatalf("%d keys left after idle_after", n)
	}
}
