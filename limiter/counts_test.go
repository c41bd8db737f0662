package limiter

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

func TestWindowStart(t *testing.T) {
	cases := []struct{ now, w, want int64 }{
		{0, 10, 0},
		{9, 10, 0},
		{10, 10, 10},
		{25, 10, 20},
		{-1, 10, -10}, // before the epoch: still the window containing now
		{-10, 10, -10},
		{-11, 10, -20},
		{math.MaxInt64, 1 << 62, 1 << 62},
		{w0 + 59e9, 60e9, w0},
	}
	for i, c := range cases {
		if got := WindowStart(c.now, c.w); got != c.want {
			t.Errorf("case %d: WindowStart(%d, %d) = %d, want %d", i, c.now, c.w, got, c.want)
		}
	}
}

// TestSlidingCounts pins the edges of the sliding window arithmetic:
// the exact boundary, a full current window, a clock behind the window,
// an instant past the window's end, probes and overflow.
func TestSlidingCounts(t *testing.T) {
	const big = math.MaxInt64
	cases := []struct {
		name        string
		c           SlidingCounts
		limit, cost int64
		fits        bool
		remaining   int64
		retry       int64 // checked when the cost does not fit and is at most limit
		reset       int64
	}{
		{"empty", SlidingCounts{0, 0, 0, 10}, 10, 10, true, 10, 0, 0},
		// prev weighs 10·(10−5)/10 = 5: 5 more fit, exactly
		{"on the boundary", SlidingCounts{10, 0, 5, 10}, 10, 5, true, 5, 0, 5},
		// 6 fit once 10·(10−e)/10 <= 4: e = 6, one from now
		{"just above the boundary", SlidingCounts{10, 0, 5, 10}, 10, 6, false, 5, 1, 5},
		// the next window, where 10 weighs 10·(10−e)/10 <= 9: e = 1; 7 + 1
		{"current window full", SlidingCounts{0, 10, 3, 10}, 10, 1, false, 0, 8, 17},
		{"both windows count", SlidingCounts{4, 3, 5, 10}, 10, 5, true, 5, 0, 15},
		// 4·(10−e)/10 + 3 + 6 <= 10: e = 7.5, so 8: three from now
		{"both windows, wait in this one", SlidingCounts{4, 3, 5, 10}, 10, 6, false, 5, 3, 15},
		// a clock behind the window weighs prev fully and waits from the
		// window's start for the weight to decay; the window's end counts
		// from the instant
		// the weight is the window start's until the clock reaches it: e = 1
		// is 6 from an instant 5 before the start (it said 1: a retry then
		// was refused again)
		{"clock behind the window", SlidingCounts{10, 0, -5, 10}, 10, 1, false, 0, 6, 15},
		{"clock behind, current full", SlidingCounts{0, 10, -5, 10}, 10, 1, false, 0, 16, 25},
		{"past the window's end: prev weighs nothing", SlidingCounts{10, 2, 12, 10}, 10, 8, true, 8, 0, 8},
		// a probe waits for the next window, where 11 weighs 11·(10−e)/10 <= 10: e = 1
		{"probe over the limit", SlidingCounts{0, 11, 0, 10}, 10, 0, false, 0, 11, 20},
		{"probe", SlidingCounts{3, 3, 5, 10}, 10, 0, true, 5, 0, 15},
		{"cost above the limit", SlidingCounts{0, 0, 0, 10}, 10, 11, false, 10, 0, 0},
		{"products beyond 64 bits", SlidingCounts{0, 0, 0, 1 << 62}, big, big, true, big, 0, 0},
		{"prev beyond 64 bits", SlidingCounts{big, 0, 0, 1 << 62}, big, 1, false, 0, 1, 1 << 62},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.c.Fits(c.limit, c.cost); got != c.fits {
				t.Errorf("%+v.Fits(%d, %d) = %v, want %v", c.c, c.limit, c.cost, got, c.fits)
			}
			if got := c.c.Remaining(c.limit); got != c.remaining {
				t.Errorf("%+v.Remaining(%d) = %d, want %d", c.c, c.limit, got, c.remaining)
			}
			if !c.fits && c.cost <= c.limit {
				if got := c.c.RetryAfter(c.limit, c.cost); got != c.retry {
					t.Errorf("%+v.RetryAfter(%d, %d) = %d, want %d", c.c, c.limit, c.cost, got, c.retry)
				}
			}
			if got := c.c.ResetAfter(); got != c.reset {
				t.Errorf("%+v.ResetAfter() = %d, want %d", c.c, got, c.reset)
			}
		})
	}
}

// at is c seen d later: the windows roll at Window, twice at 2 × Window.
func (c SlidingCounts) at(d int64) SlidingCounts {
	e := c.Elapsed + d
	switch {
	case e >= 2*c.Window:
		return SlidingCounts{Elapsed: e % c.Window, Window: c.Window}
	case e >= c.Window:
		return SlidingCounts{Prev: c.Cur, Elapsed: e - c.Window, Window: c.Window}
	}
	return SlidingCounts{Prev: c.Prev, Cur: c.Cur, Elapsed: e, Window: c.Window}
}

// TestPropertySlidingCounts checks on every draw, against the estimate
// computed directly (small values: no overflow), that Fits is the
// estimate's test, that the floored Remaining decides as Fits does, that
// RetryAfter is the first instant the cost fits (within the current
// window for a cost that fits already) and ResetAfter the first the
// counter is empty.
func TestPropertySlidingCounts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		W := rapid.Int64Range(1, 60).Draw(t, "window")
		limit := rapid.Int64Range(0, 40).Draw(t, "limit")
		c := SlidingCounts{
			Prev:    rapid.Int64Range(0, limit).Draw(t, "prev"),
			Cur:     rapid.Int64Range(0, limit+2).Draw(t, "cur"),
			Elapsed: rapid.Int64Range(0, W-1).Draw(t, "elapsed"),
			Window:  W,
		}
		cost := rapid.Int64Range(0, limit+1).Draw(t, "cost")
		est := func(c SlidingCounts) int64 { return c.Prev*(c.Window-c.Elapsed) + c.Cur*c.Window } // × W
		fits := func(c SlidingCounts) bool { return est(c)+cost*W <= limit*W }
		if got, want := c.Fits(limit, cost), fits(c); got != want {
			t.Fatalf("%+v.Fits(%d, %d) = %v, want %v", c, limit, cost, got, want)
		}
		rem := c.Remaining(limit)
		if rem < 0 || rem > limit {
			t.Fatalf("%+v.Remaining(%d) = %d: outside [0, limit]", c, limit, rem)
		}
		if cost >= 1 && (cost <= rem) != c.Fits(limit, cost) {
			t.Fatalf("%+v: Remaining %d, but Fits(%d) = %v", c, rem, cost, c.Fits(limit, cost))
		}
		if !fits(c) && cost <= limit {
			r := c.RetryAfter(limit, cost)
			if r < 1 || !fits(c.at(r)) || fits(c.at(r-1)) {
				t.Fatalf("%+v.RetryAfter(%d, %d) = %d: fits then %v, one before %v",
					c, limit, cost, r, fits(c.at(r)), fits(c.at(r-1)))
			}
		}
		if fits(c) {
			if r := c.RetryAfter(limit, cost); r < -c.Elapsed || r > W-c.Elapsed {
				t.Fatalf("%+v.RetryAfter(%d, %d) = %d for a cost that fits: outside the current window", c, limit, cost, r)
			}
		}
		if est(c) > 0 {
			r := c.ResetAfter()
			if r < 1 || est(c.at(r)) != 0 || est(c.at(r-1)) == 0 {
				t.Fatalf("%+v.ResetAfter() = %d: counts %+v then, %+v one before", c, r, c.at(r), c.at(r-1))
			}
		} else if r := c.ResetAfter(); r != 0 {
			t.Fatalf("%+v.ResetAfter() = %d for an empty counter", c, r)
		}
	})
}
