package counters

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/limiter"
)

// slidingCase is a sliding window counter to decide on: the previous and
// current window's counts (the other shards' part apart), how far into the
// current window, and a cost against a ceiling.
type slidingCase struct {
	prev, prevShards, cur, shards int64
	elapsed, window               int64 // ms
	cost, ceiling                 int64
}

func (c slidingCase) counts() limiter.SlidingCounts {
	return limiter.SlidingCounts{Prev: c.prev + c.prevShards, Cur: c.cur + c.shards, Elapsed: c.elapsed, Window: c.window}
}

// slidingCases are the edges (the exact boundary from both sides, the
// window's start and end, an empty previous window, a full current one)
// and seeded draws, each tried at the smallest ceiling that admits it, one
// below, and one above. Every product stays below 2^53, where the scripts'
// Lua numbers are exact.
func slidingCases() []slidingCase {
	cs := []slidingCase{
		{prev: 10, elapsed: 500, window: 1000, cost: 5, ceiling: 10}, // 10·500 = (10−5)·1000
		{prev: 10, elapsed: 500, window: 1000, cost: 6, ceiling: 10},
		{prev: 4, prevShards: 6, cur: 1, shards: 2, elapsed: 300, window: 1000, cost: 1, ceiling: 11},
		{prev: 7, elapsed: 0, window: 60000, cost: 3, ceiling: 10},
		{prev: 7, elapsed: 60000, window: 60000, cost: 10, ceiling: 10},
		{cur: 10, elapsed: 1, window: 1000, cost: 1, ceiling: 10},
		{cur: 9, elapsed: 999, window: 1000, cost: 1, ceiling: 10},
		{prev: 1, cur: 0, elapsed: 0, window: 86_400_000, cost: 0, ceiling: 0},
	}
	r := rand.New(rand.NewPCG(21, 3))
	windows := []int64{1000, 60_000, 3_600_000, 86_400_000}
	for range 60 {
		c := slidingCase{window: windows[r.IntN(len(windows))], prev: r.Int64N(1 << 20), cur: r.Int64N(1 << 20), cost: r.Int64N(100)}
		c.prevShards, c.shards = r.Int64N(c.prev+1), r.Int64N(c.cur+1)
		c.prev, c.cur = c.prev-c.prevShards, c.cur-c.shards
		switch r.IntN(3) {
		case 0: // half way: an even previous count weighs exactly half
			c.elapsed, c.prev = c.window/2, c.prev&^1
		case 1:
			c.elapsed = r.Int64N(c.window + 1)
		default:
			c.elapsed = r.Int64N(c.window / 1000) // near the start
		}
		p := c.counts()
		weight := (p.Prev*(c.window-c.elapsed) + c.window - 1) / c.window // ⌈prev·(W−e)/W⌉
		for d := int64(-1); d <= 1; d++ {
			c.ceiling = max(0, p.Cur+c.cost+weight+d)
			cs = append(cs, c)
		}
	}
	return cs
}

// TestChargeScriptMatchesSlidingCounts holds the near-limit charge of
// every store equal to limiter.SlidingCounts: the in-memory store and the
// Redis script (standalone and cluster), for sliding and fixed windows,
// decide every case as SlidingCounts.Fits does.
func TestChargeScriptMatchesSlidingCounts(t *testing.T) {
	ms := int64(time.Millisecond)
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var n int
			for i, c := range slidingCases() {
				// a fixed window at its own boundary too: the previous
				// window's weight moves the sliding one's
				fixed := c.counts().Cur + c.cost
				for j, ceiling := range []int64{c.ceiling, c.ceiling, max(0, fixed-1), fixed} {
					sliding := j == 0
					c.ceiling = ceiling
					n++
					key := fmt.Sprintf("api:k|k=%d", n)
					q := &ChargeRequest{Key: key, Kind: KindWindow, Instance: "a/1", Now: w0 + c.elapsed*ms, Cost: c.cost,
						Window: w0, WindowNanos: c.window * ms, Ceiling: c.ceiling, OwnEmitted: c.cur,
						Sliding: sliding, PrevEmitted: c.prev, OtherShards: c.shards, PrevOtherShards: c.prevShards}
					want := c.counts()
					if !sliding { // a fixed window weighs no previous one
						q.PrevEmitted, q.PrevOtherShards, want.Prev = 0, 0, 0
					}
					res, err := s.Charge(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					if w := want.Fits(c.ceiling, c.cost); res.Allowed != w {
						t.Fatalf("case %d.%d %+v, sliding %v: allowed %v, SlidingCounts%+v.Fits(%d, %d) = %v",
							i, j, c, sliding, res.Allowed, want, c.ceiling, c.cost, w)
					}
				}
			}
		})
	}
}

// TestSyncScriptMatchesSlidingCounts holds the `mode: sync` sliding window
// script equal to limiter.SlidingCounts on counts no walk of the
// conformance suite reaches: the decision, the remaining count, the reset
// and the retry, in the script's microseconds.
func TestSyncScriptMatchesSlidingCounts(t *testing.T) {
	targets := redisTargets(t, "%s is unset: the sync script runs in Redis")
	us := int64(time.Microsecond)
	ctx := context.Background()
	for name, client := range targets {
		t.Run(name, func(t *testing.T) {
			store := NewRedis(client, testsvc.Unique("sw"), 0)
			for i, c := range slidingCases() {
				if c.cost > c.ceiling || c.elapsed >= c.window {
					// never fits: the script answers before reading the
					// windows; or an instant of the next window, by the clock
					continue
				}
				// the case's times read as µs, the script's unit (products
				// in ms·1000 would leave the doubles' exact range)
				want := c.counts()
				W, e := want.Window, want.Elapsed
				q := &SyncRequest{Key: fmt.Sprintf("api:k|k=%d", i), Algorithm: config.AlgSlidingWindow, Limit: c.ceiling,
					Window: W * us, Cost: c.cost, Now: w0 + e*us}
				stem, ws := store.syncKeys(q)[0], w0/us
				for start, n := range map[int64]int64{ws: want.Cur, ws - W: want.Prev} {
					if err := client.Set(ctx, fmt.Sprintf("%s:%d", stem, start), n, time.Minute).Err(); err != nil {
						t.Fatal(err)
					}
				}
				got, err := store.ChargeSync(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				after, retry := want, time.Duration(0)
				if got.Allowed {
					after.Cur += c.cost
				} else {
					retry = time.Duration(want.RetryAfter(c.ceiling, c.cost) * us)
				}
				if got.Allowed != want.Fits(c.ceiling, c.cost) || got.Remaining != after.Remaining(c.ceiling) ||
					got.ResetAfter != time.Duration(after.ResetAfter()*us) || got.RetryAfter != retry {
					t.Fatalf("case %d %+v: script %+v; SlidingCounts%+v: fits %v, then remaining %d, reset %v, retry %v",
						i, c, got, want, want.Fits(c.ceiling, c.cost), after.Remaining(c.ceiling),
						time.Duration(after.ResetAfter()*us), retry)
				}
			}
		})
	}
}
