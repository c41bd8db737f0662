package limiter

import (
	"testing"
	"time"
)

// w0 is a window-aligned start (a multiple of a second, minute and hour).
const w0 = int64(1_699_999_200) * 1e9

func TestFixedWindow(t *testing.T) {
	cases := []struct {
		name  string
		alg   FixedWindow
		steps []step
	}{
		{"limit per aligned window", FixedWindow{Limit: 2, Window: time.Minute}, []step{
			{1e9, 1, true, 1, 0, nil}, {2e9, 1, true, 0, 0, nil},
			{3e9, 1, false, 0, 57 * time.Second, nil},
			{60e9, 2, true, 0, 0, nil}, // new window
		}},
		{"refused leaves the count", FixedWindow{Limit: 3, Window: time.Second}, []step{
			{0, 2, true, 1, 0, nil}, {0, 2, false, 1, time.Second, nil}, {0, 1, true, 0, 0, nil},
		}},
		{"envoy semantics charge denied calls", FixedWindow{Limit: 3, Window: time.Second, ChargeDenied: true}, []step{
			{0, 2, true, 1, 0, nil}, {0, 2, false, 0, time.Second, nil}, {0, 1, false, 0, time.Second, nil},
			{0, 5, false, 0, Never, ErrCostExceedsLimit},
		}},
		{"clock behind the window stays in it", FixedWindow{Limit: 1, Window: time.Second}, []step{
			{5e9, 1, true, 0, 0, nil}, {4e9, 1, false, 0, 2 * time.Second, nil},
		}},
		{"probe", FixedWindow{Limit: 1, Window: time.Second}, []step{{0, 0, true, 1, 0, nil}}},
		{"cost above limit", FixedWindow{Limit: 1, Window: time.Second}, []step{{0, 2, false, 0, Never, ErrCostExceedsLimit}}},
		{"time out of range", FixedWindow{Limit: 1, Window: time.Second}, []step{{MaxTime, 1, false, 0, Never, ErrTimeRange}}},
		{"negative cost", FixedWindow{Limit: 1, Window: time.Second}, []step{{0, -1, false, 0, Never, ErrNegativeCost}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runSteps(t, c.alg, w0, c.steps) })
	}
}

func TestSlidingWindow(t *testing.T) {
	sw := SlidingWindow{Limit: 10, Window: 10 * time.Second}
	runSteps(t, sw, w0, []step{
		{0, 10, true, 0, 0, nil},
		{5e9, 1, false, 0, 6 * time.Second, nil}, // next window at 10 s, then prev weight must fall to 9/10: 1 s in
		{10e9, 1, false, 0, time.Second, nil},    // prev weighs 10·(10−0)/10 = 10
		{11e9, 1, true, 0, 0, nil},               // prev weighs 9 → 9 + 1 = 10
		{15e9, 5, false, 4, time.Second, nil},    // 10·0.5 + 1 + 5 = 11 > 10: wait until 10·(1−f) ≤ 4, f = 0.6
		{19e9, 5, true, 3, 0, nil},
		{40e9, 10, true, 0, 0, nil}, // two windows later: empty
	})
	// A clock behind the window the state is in decides at that window's
	// start, and its RetryAfter counts from the caller's clock: the wait
	// for the window to start is part of it.
	runSteps(t, sw, w0, []step{
		{0, 10, true, 0, 0, nil},
		{10e9, 0, true, 0, 0, nil},                  // rolled: the previous window weighs 10
		{9e9, 1, false, 0, 2 * time.Second, nil},    // 1 s behind: at 11 s the weight is 9
		{11e9 - 1, 1, false, 0, 1, nil},             // one ns short
		{11e9, 1, true, 0, 0, nil},                  // 9 + 1 = 10
		{9e9, 5, false, 0, 7 * time.Second, nil},    // the weight falls to 10 − 1 − 5 = 4 at 16 s
		{20e9, 10, false, 9, 10 * time.Second, nil}, // the 1 of [10 s, 20 s) weighs until 30 s
	})
}

func TestSlidingLog(t *testing.T) {
	sl := SlidingLog{Limit: 3, Window: 10 * time.Second}
	runSteps(t, sl, w0, []step{
		{0, 1, true, 2, 0, nil},
		{4e9, 2, true, 0, 0, nil},
		{5e9, 1, false, 0, 5 * time.Second, nil}, // the first hit expires at 10 s
		{10e9, 1, true, 0, 0, nil},
		{12e9, 2, false, 0, 2 * time.Second, nil}, // needs the 4 s entry (2) gone at 14 s
		{14e9, 2, true, 0, 0, nil},
		{3e9, 1, false, 0, 6 * time.Second, nil}, // clock rollback: time stands at 14 s; the 10 s hit expires at 20 s
		{0, 4, false, 0, Never, ErrCostExceedsLimit},
	})
}

func TestParameterChange(t *testing.T) {
	k, _ := NewKeyed()
	var small Algorithm = TokenBucket{Capacity: 10, Refill: PerSecond(1)}
	var big Algorithm = TokenBucket{Capacity: 100, Refill: PerSecond(10)}
	mustAllow := func(alg Algorithm, at, cost int64, want bool, wantRem int64) {
		t.Helper()
		d, err := k.AllowAt("k", alg, t0+at, cost, "")
		if err != nil || d.Allowed != want || d.Remaining != wantRem {
			t.Fatalf("at %d cost %d: got %v rem %d err %v, want %v rem %d", at, cost, d.Allowed, d.Remaining, err, want, wantRem)
		}
	}
	mustAllow(small, 0, 10, true, 0)
	// 2 s under the old rate refill 2 tokens; the new capacity does not
	// refill anything by itself.
	mustAllow(big, 2e9, 0, true, 2)
	mustAllow(big, 3e9, 0, true, 12) // now 10/s
	// shrinking clamps to the new capacity
	mustAllow(big, 20e9, 0, true, 100)
	mustAllow(small, 20e9, 0, true, 10)

	// switching algorithm restarts as exhausted until the old state is fresh
	var gc Algorithm = GCRA{Burst: 10, Rate: PerSecond(1)}
	mustAllow(small, 21e9, 10, true, 0)
	d, _ := k.AllowAt("k", gc, t0+21e9, 1, "")
	if d.Allowed {
		t.Fatalf("algorithm switch handed out a fresh burst: %+v", d)
	}
}
