package checker

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestKeyAtItsBandEdgeIsReadSoon: a read that leaves a key exactly at
// its band's edge (remaining − in flight − the others' first-touch
// allowances = threshold: one more hit would
// be near) schedules the next read at min_refresh, as for a key inside
// the band — even when no rate is known to say how soon it would get
// there (this instance only probes; the others' hits came before it
// looked).
func TestKeyAtItsBandEdgeIsReadSoon(t *testing.T) {
	ms := counters.NewMemStore()
	clk := newClock()
	ms.SetClock(clk)
	rules := ruleStore(t, asyncRules)
	cs := &countingStore{MemStore: ms}
	a, err := New(Config{InstanceName: "a"}, rules, cs, &applyProducer{store: ms}, clk)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(Config{InstanceName: "b"}, rules, ms, &applyProducer{store: ms}, clk)
	check := func(c *Checker, hits int64) {
		t.Helper()
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(hits, "huge", "edge"), &d); err != nil || !d.Allowed() {
			t.Fatalf("%d hits: %v %v", hits, d.Code, err)
		}
	}
	// huge: 1000 a minute, threshold 1 % = 10, and b's first-touch
	// allowance (1 % = 10) the far band keeps clear of: b leaves exactly 20
	check(b, 980)
	// a only probes: no rate of its own, and the others' total stands still
	readAfter := func(limit time.Duration) bool {
		reads := cs.reads.Load()
		for end := clk.Now() + int64(limit); clk.Now() < end; {
			clk.ns.Add(int64(10 * time.Millisecond))
			check(a, 0) // keeps the key active, so that it is read
			a.Refresh(context.Background())
			if cs.reads.Load() > reads {
				return true
			}
		}
		return false
	}
	if !readAfter(10 * time.Second) {
		t.Fatal("a did not read the key in 10 s")
	}
	if !readAfter(10 * time.Second) { // a second read: two answers, a rate of 0 learned
		t.Fatal("a did not read the key again in 10 s")
	}
	if !readAfter(100 * time.Millisecond) {
		t.Fatal("a key at its band's edge was not read again within min_refresh (50 ms) + a tick")
	}
}
