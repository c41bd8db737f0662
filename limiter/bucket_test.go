package limiter

import (
	"errors"
	"testing"
	"time"
)

// t0 is a fixed start; tests add offsets to it.
const t0 = int64(1_700_000_000_000_000_000)

type step struct {
	at        int64 // offset from t0, ns
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	err       error
}

// runSteps drives alg from a fresh state through steps, at base + offset.
func runSteps(t *testing.T, alg Algorithm, base int64, steps []step) {
	t.Helper()
	var s State
	for i, st := range steps {
		d, err := alg.AllowAt(&s, base+st.at, st.cost)
		if !errors.Is(err, st.err) {
			t.Fatalf("step %d: err = %v, want %v", i, err, st.err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry {
			t.Fatalf("step %d (at %d cost %d): got allowed=%v remaining=%d retry=%v, want %v %d %v",
				i, st.at, st.cost, d.Allowed, d.Remaining, d.RetryAfter, st.allowed, st.remaining, st.retry)
		}
	}
}

func TestTokenBucket(t *testing.T) {
	third := int64(333_333_334) // 1/3 s rounded up
	cases := []struct {
		name  string
		alg   TokenBucket
		steps []step
	}{
		{"initially full, then refusal", TokenBucket{3, PerSecond(3)}, []step{
			{0, 3, true, 0, 0, nil},
			{0, 1, false, 0, time.Duration(third), nil},
			{0, 1, false, 0, time.Duration(third), nil}, // repeated refusal changes nothing
		}},
		{"exact refill of a third of a second", TokenBucket{3, PerSecond(3)}, []step{
			{0, 3, true, 0, 0, nil},
			{third - 1, 1, false, 0, 1, nil},
			{third, 1, true, 0, 0, nil},
		}},
		{"fractions carry exactly", TokenBucket{10, PerSecond(3)}, []step{
			{0, 10, true, 0, 0, nil},
			// three refills of 1/3 s each sum to exactly 1 s: 3 tokens, no drift
			{third, 1, true, 0, 0, nil},
			{2 * third, 1, true, 0, 0, nil},
			{1e9, 1, true, 0, 0, nil},
			{1e9, 1, false, 0, time.Duration(third), nil},
		}},
		{"cost equal to capacity", TokenBucket{5, PerSecond(1)}, []step{
			{0, 5, true, 0, 0, nil},
			{0, 5, false, 0, 5 * time.Second, nil},
			{5e9, 5, true, 0, 0, nil},
		}},
		{"no time progress", TokenBucket{2, PerSecond(1)}, []step{
			{0, 1, true, 1, 0, nil}, {0, 1, true, 0, 0, nil}, {0, 1, false, 0, time.Second, nil},
		}},
		{"clock rollback creates no tokens", TokenBucket{2, PerSecond(1)}, []step{
			{10e9, 2, true, 0, 0, nil},
			{5e9, 1, false, 0, 6 * time.Second, nil}, // 5 s behind: wait until 11 s
			{10e9 + 5e8, 1, false, 0, 5e8, nil},
			{11e9, 1, true, 0, 0, nil},
		}},
		{"long idle cannot overflow", TokenBucket{1 << 40, Rate{1 << 40, time.Nanosecond}}, []step{
			{0, 1 << 40, true, 0, 0, nil},
			{1 << 61, 1, true, 1<<40 - 1, 0, nil}, // 73 years idle
		}},
		{"probe reports without consuming", TokenBucket{2, PerSecond(1)}, []step{
			{0, 0, true, 2, 0, nil}, {0, 2, true, 0, 0, nil}, {0, 0, true, 0, 0, nil},
		}},
		{"zero refill is a quota that never comes back", TokenBucket{1, Rate{0, time.Second}}, []step{
			{0, 1, true, 0, 0, nil}, {1e15, 1, false, 0, Never, nil},
		}},
		{"negative cost", TokenBucket{1, PerSecond(1)}, []step{{0, -1, false, 0, Never, ErrNegativeCost}}},
		{"cost above capacity never fits", TokenBucket{2, PerSecond(1)}, []step{{0, 3, false, 0, Never, ErrCostExceedsLimit}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runSteps(t, c.alg, t0, c.steps) })
	}
}

func TestGCRA(t *testing.T) {
	cases := []struct {
		name  string
		alg   GCRA
		steps []step
	}{
		{"burst then spacing", GCRA{2, PerSecond(2)}, []step{
			{0, 1, true, 1, 0, nil}, {0, 1, true, 0, 0, nil}, {0, 1, false, 0, 5e8, nil},
			{5e8 - 1, 1, false, 0, 1, nil}, {5e8, 1, true, 0, 0, nil},
		}},
		{"thirds are exact", GCRA{1, PerSecond(3)}, []step{
			{0, 1, true, 0, 0, nil}, {333_333_333, 1, false, 0, 1, nil}, {333_333_334, 1, true, 0, 0, nil},
			// the bucket was full at 333_333_334, so the TAT restarts there:
			// 666_666_667⅓, rounded up
			{666_666_666, 1, false, 0, 2, nil}, {666_666_668, 1, true, 0, 0, nil},
		}},
		{"clock rollback", GCRA{1, PerSecond(1)}, []step{
			{10e9, 1, true, 0, 0, nil}, {9e9, 1, false, 0, 2e9, nil}, {11e9, 1, true, 0, 0, nil},
		}},
		{"long idle", GCRA{3, PerSecond(1)}, []step{{0, 3, true, 0, 0, nil}, {1 << 61, 3, true, 0, 0, nil}}},
		{"probe", GCRA{3, PerSecond(1)}, []step{{0, 0, true, 3, 0, nil}, {0, 2, true, 1, 0, nil}, {0, 0, true, 1, 0, nil}}},
		{"cost above burst", GCRA{3, PerSecond(1)}, []step{{0, 4, false, 0, Never, ErrCostExceedsLimit}}},
		{"negative cost", GCRA{3, PerSecond(1)}, []step{{0, -2, false, 0, Never, ErrNegativeCost}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runSteps(t, c.alg, t0, c.steps) })
	}
}

func TestLeakyBucket(t *testing.T) {
	lb := LeakyBucket{Capacity: 4, Leak: PerSecond(2)}
	runSteps(t, lb, t0, []step{
		{0, 4, true, 0, 0, nil},
		{0, 1, false, 0, 5e8, nil},
		{1e9, 2, true, 0, 0, nil}, // 2 leaked in a second
		{1e9, 1, false, 0, 5e8, nil},
	})
	var s State
	_, _ = lb.AllowAt(&s, t0, 3)
	if got := lb.Level(&s, t0+5e8); got != 2 {
		t.Fatalf("level after 0.5 s: got %d, want 2", got)
	}
}

func TestInvalidParams(t *testing.T) {
	cases := []struct {
		name string
		alg  Algorithm
	}{
		{"token bucket zero capacity", TokenBucket{0, PerSecond(1)}},
		{"token bucket negative rate", TokenBucket{1, Rate{-1, time.Second}}},
		{"token bucket zero period", TokenBucket{1, Rate{1, 0}}},
		{"token bucket refill slower than a century", TokenBucket{1 << 40, Rate{1, 1 << 40}}},
		{"gcra zero rate", GCRA{1, Rate{0, time.Second}}},
		{"gcra negative burst", GCRA{-1, PerSecond(1)}},
		{"leaky zero rate", LeakyBucket{1, Rate{0, time.Second}}},
		{"fixed window zero limit", FixedWindow{Limit: 0, Window: time.Second}},
		{"fixed window negative window", FixedWindow{Limit: 1, Window: -time.Second}},
		{"sliding window zero window", SlidingWindow{Limit: 1}},
		{"sliding log too large", SlidingLog{Limit: MaxSlidingLogLimit + 1, Window: time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.alg.Validate()
			var pe *ParamError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("got %v, want a ParamError", err)
			}
			k, _ := NewKeyed()
			if _, err := k.AllowAt("x", c.alg, t0, 1, ""); !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("Keyed.AllowAt: got %v, want ErrInvalidParams", err)
			}
		})
	}
}

func TestGCRARaise(t *testing.T) {
	g := GCRA{Burst: 4, Rate: PerSecond(1)}
	var s State
	g.AllowAt(&s, t0, 1)
	if g.TAT(&s) != t0+1e9 {
		t.Fatalf("TAT %d", g.TAT(&s)-t0)
	}
	g.Raise(&s, t0+3e9) // others took two more
	if d, _ := g.AllowAt(&s, t0, 0); d.Remaining != 1 {
		t.Fatalf("after raise: remaining %d, want 1", d.Remaining)
	}
	g.Raise(&s, t0) // never back
	if g.TAT(&s) != t0+3e9 {
		t.Fatal("raise moved the TAT back")
	}
}
