package checker

import (
	"context"
	"github.com/velvetrope/velvetrope/config"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// checkHeld verifies each shard's held count against its lazy entries.
func checkHeld(t *testing.T, c *Checker, step int) {
	t.Helper()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		var want int64
		for _, e := range sh.keys {
			for ; e != nil; e = e.next {
				if e.emit == emitLazy {
					want += int64(e.pend.Counted)
				}
			}
		}
		got := sh.held
		sh.mu.Unlock()
		if got != want {
			t.Fatalf("step %d, shard %d: held %d, its lazy keys hold %d", step, i, got, want)
		}
	}
}

// TestHeldHitsBounded (issue 19, item 11): a far key holds at most
// MaxHeldHits before it goes at the next flush (it held up to
// MaxEmitInterval of its traffic, about a second: what a kill -9 took with
// it), the lazy keys of all hold at most MaxHeldTotal, and each shard's
// count of it stays exact through decisions, window rolls, evictions and
// flushes.
func TestHeldHitsBounded(t *testing.T) {
	ctx := context.Background()
	ms := int64(time.Millisecond)
	t.Run("per key", func(t *testing.T) {
		r := newRig(t, Config{CheckerConfig: config.CheckerConfig{MaxHeldHits: 20}})
		for range 10 { // past the young-key period, with store answers: far
			r.check(t, 1, "huge", "fast")
			r.clk.ns.Add(50 * ms)
			r.c.Refresh(ctx)
		}
		r.c.Flush(ctx)
		before := len(r.prod.all)
		for i := range 40 { // 40 hits within one flush interval
			r.clk.ns.Add(ms)
			r.check(t, 1, "huge", "fast")
			if held := r.c.Snapshot().HeldHits; held > 20 {
				t.Fatalf("decision %d: %d hits held, above MaxHeldHits 20", i, held)
			}
		}
		r.c.flush(ctx, false)
		if n := len(r.prod.all) - before; n != 1 || r.prod.all[before].CountedCost != 40 {
			t.Fatalf("a key past MaxHeldHits: %d deltas at the next flush (%v), want one of 40 hits", n, r.prod.all[before:])
		}
	})
	t.Run("in all", func(t *testing.T) {
		r := newRig(t, Config{CheckerConfig: config.CheckerConfig{MaxHeldTotal: 64}, Shards: 4})
		keys := make([]string, 200)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		for range 10 {
			for _, k := range keys {
				r.check(t, 1, "huge", k)
			}
			r.clk.ns.Add(50 * ms)
			r.c.Refresh(ctx)
		}
		r.c.Flush(ctx)
		for round := range 5 {
			for _, k := range keys {
				r.clk.ns.Add(ms / 10)
				r.check(t, 1, "huge", k)
				if held := r.c.Snapshot().HeldHits; held > 64 {
					t.Fatalf("round %d: %d hits held, above MaxHeldTotal 64", round, held)
				}
			}
			r.c.flush(ctx, false)
		}
	})
	t.Run("exact", func(t *testing.T) {
		r := newRig(t, Config{CheckerConfig: config.CheckerConfig{MaxKeys: 64, MaxHeldHits: 8, MaxHeldTotal: 40}, Shards: 4})
		rng := rand.New(rand.NewPCG(1, 2))
		for step := range 5000 {
			r.clk.ns.Add(rng.Int64N(20 * ms))
			key := []string{"huge", "big", "fixed", "bucket", "sliding"}[rng.IntN(5)]
			r.check(t, int64(rng.IntN(3)), key, "v"+strconv.Itoa(rng.IntN(100)))
			switch rng.IntN(10) {
			case 0:
				r.c.flush(ctx, false)
			case 1:
				r.c.Refresh(ctx)
			}
			checkHeld(t, r.c, step)
		}
		r.c.Flush(ctx)
		checkHeld(t, r.c, -1)
		if held := r.c.Snapshot().HeldHits; held != 0 {
			t.Fatalf("after Flush: %d hits held", held)
		}
	})
}
