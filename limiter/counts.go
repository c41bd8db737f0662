package limiter

// WindowStart returns the start of the window of length w containing now,
// windows aligned to the Unix epoch (as Envoy's ratelimit service aligns
// them to the unit): the largest multiple of w not above now, also for a
// negative now. w must be > 0.
//
// Every window of velvetrope starts where it says: these algorithms' and
// the async checker's windows, the counter stores' window keys. The Redis
// scripts compute it as now − now % W (Lua's % rounds towards −∞, so it
// agrees).
func WindowStart(now, w int64) int64 {
	m := now % w
	if m < 0 {
		m += w
	}
	return now - m
}

// SlidingCounts is a sliding window counter seen at one instant: the
// counts of the previous and the current fixed window, and how far the
// instant lies into the current one. The counter estimates the count over
// the last Window as Prev × (Window − Elapsed) / Window + Cur; every
// method compares the estimate scaled by Window, in 128-bit integers, so
// nothing is rounded and no non-negative int64 input overflows.
//
// It is the arithmetic [SlidingWindow] decides with, exported so that an
// engine keeping the counts elsewhere decides exactly as it does:
// velvetrope's async checker and its in-memory counter store use it, and
// the Redis scripts of the counter store mirror it (a test holds them
// equal). Elapsed and Window may be in any one unit (nanoseconds for
// [SlidingWindow]; the scripts use milliseconds or microseconds); the
// times the methods return are in that unit. A SlidingCounts is a plain
// value: safe to copy and to use from several goroutines.
type SlidingCounts struct {
	Prev, Cur int64 // the previous and the current window's counts, >= 0
	// Elapsed is the time from the current window's start to the instant.
	// The previous window's weight reads it clamped to [0, Window]: a clock
	// behind the window (Elapsed < 0) weighs the previous window fully, and
	// waits for that weight to decay as if at the window's start, while the
	// waits to a window's end count from the instant itself.
	Elapsed int64
	Window  int64 // the window length, > 0
}

// weighted is the previous window's weight, Prev × (Window − Elapsed), in
// units of 1/Window hits.
func (c SlidingCounts) weighted() u128 {
	return mul(c.Prev, c.Window-min(max(c.Elapsed, 0), c.Window))
}

// Fits reports whether cost more hits fit under limit:
// Cur + cost <= limit and Prev × (Window − Elapsed) <= (limit − Cur − cost)
// × Window. limit and cost are >= 0; a cost above limit never fits.
func (c SlidingCounts) Fits(limit, cost int64) bool {
	return c.Cur <= limit-cost && c.weighted().cmp(mul(limit-c.Cur-cost, c.Window)) <= 0
}

// Remaining is how many hits fit at the instant:
// ⌊(limit × Window − Prev × (Window − Elapsed) − min(Cur, limit) × Window)
// / Window⌋, or 0 when that is negative. For cost >= 1, cost <= Remaining
// exactly when Fits(limit, cost): an engine that keeps only the floored
// remaining decides as the exact comparison does.
func (c SlidingCounts) Remaining(limit int64) int64 {
	room := mul(limit-min(c.Cur, limit), c.Window)
	w := c.weighted()
	if w.cmp(room) >= 0 {
		return 0
	}
	q, _, _ := room.sub(w).div(c.Window) // at most limit: it fits
	return q
}

// RetryAfter is how long from the instant until cost fits if nothing else
// is counted meanwhile: later in the current window, as the previous
// window's weight decays, or in the next window, where Cur becomes the
// decaying previous count. It is meant for a cost that does not fit now
// and is at most limit (a larger cost never fits); for a cost that fits
// now it lies within the current window, −Elapsed <= RetryAfter <=
// Window − Elapsed (an engine refusing such a cost for a reason of its own,
// as the checker does when its slice of the limit is spent, waits its own
// time on top).
func (c SlidingCounts) RetryAfter(limit, cost int64) int64 {
	W := c.Window
	if c.Cur <= limit-cost && c.Prev > 0 {
		// the smallest elapsed e' with Prev × (W − e') <= (limit − Cur − cost) × W
		q, _, ok := mul(limit-c.Cur-cost, W).div(c.Prev)
		if !ok || q > W {
			q = W
		}
		// counted from the instant: a clock behind the window's start
		// (Elapsed < 0) waits for the start too
		return W - q - min(c.Elapsed, W)
	}
	wait := W - c.Elapsed // to the end of the current window
	if c.Cur == 0 {
		return wait
	}
	// the next window: the smallest e'' with Cur × (W − e'') <= (limit − cost) × W
	if q, _, ok := mul(limit-cost, W).div(c.Cur); ok && q < W {
		wait += W - q
	}
	return wait
}

// ResetAfter is how long from the instant until the counter counts nothing
// if nothing else is counted: the end of the next window while the current
// one counts hits (they weigh until then), else the end of the current
// window while the previous one does, else 0.
func (c SlidingCounts) ResetAfter() int64 {
	switch {
	case c.Cur > 0:
		return 2*c.Window - c.Elapsed
	case c.Prev > 0:
		return c.Window - c.Elapsed
	}
	return 0
}
