package checker

import (
	"testing"
	"time"
)

// TestSlidingRetryBehindTheWindow: a clock behind the window a sliding
// key is in (the checker's clock stepped back) decides at that window's
// start, and the RetryAfter it answers counts from the clock: the wait
// for the window to start is part of it, as in limiter.SlidingWindow.
func TestSlidingRetryBehindTheWindow(t *testing.T) {
	r := newRig(t, Config{})
	ms := int64(time.Millisecond)
	steps := []struct {
		at      int64 // offset from t0
		hits    int64
		allowed bool
		retry   time.Duration
	}{
		{500 * ms, 20, true, 0},                      // the window [0, 1 s) is full
		{1000 * ms, 0, true, 0},                      // rolled: the previous window weighs 20
		{900 * ms, 1, false, 150 * time.Millisecond}, // at 1.05 s it weighs 19
	}
	for i, st := range steps {
		r.clk.ns.Store(t0 + st.at)
		d := r.check(t, st.hits, "sliding", "behind")
		if got := d.Statuses[0]; d.Allowed() != st.allowed || got.RetryAfter != st.retry {
			t.Fatalf("step %d (at %v, %d hits): got allowed=%v retry=%v, want %v %v",
				i, time.Duration(st.at), st.hits, d.Allowed(), got.RetryAfter, st.allowed, st.retry)
		}
	}
}
