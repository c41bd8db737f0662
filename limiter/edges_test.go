package limiter

import (
	"slices"
	"testing"
	"time"
)

// edge is one step of an edge table: what a call at base+at with cost
// answers, all four numbers.
type edge struct {
	at        int64 // offset from the base, ns
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

func runEdges(t *testing.T, alg Algorithm, base int64, steps []edge) {
	t.Helper()
	var s State
	for i, st := range steps {
		d, err := alg.AllowAt(&s, base+st.at, st.cost)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry || d.ResetAfter != st.reset {
			t.Fatalf("step %d (at %d cost %d): got allowed=%v remaining=%d retry=%v reset=%v, want %v %d %v %v",
				i, st.at, st.cost, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter,
				st.allowed, st.remaining, st.retry, st.reset)
		}
	}
}

// TestEdges pins, beside the property tests, each algorithm's refusal of
// a request larger than what is left (its retry-after is the time the
// missing part takes, not the whole cost), the nanosecond before and at
// which it fits, and the window's or the refill's edge.
func TestEdges(t *testing.T) {
	// The bucket algorithms admit the same: 5 of capacity, 1 per second.
	buckets := []edge{
		{0, 3, true, 2, 0, 3 * time.Second},
		{0, 4, false, 2, 2 * time.Second, 3 * time.Second}, // 2 are missing: 2 s, not 4
		// at 2 s − 1 ns one token came back and 0.999999999 of the next
		{2e9 - 1, 4, false, 3, 1, time.Second + 1},
		{2e9, 4, true, 0, 0, 5 * time.Second},
		{2e9, 1, false, 0, time.Second, 5 * time.Second},
	}
	cases := []struct {
		name  string
		alg   Algorithm
		base  int64
		steps []edge
	}{
		{"token bucket", TokenBucket{5, PerSecond(1)}, t0, slices.Concat(buckets, []edge{
			// a clock 1 s behind the state's: the refill waits for it too
			{1e9, 0, true, 0, 0, 6 * time.Second},
			{1e9, 1, false, 0, 2 * time.Second, 6 * time.Second},
		})},
		{"gcra", GCRA{5, PerSecond(1)}, t0, buckets},
		{"leaky bucket", LeakyBucket{5, PerSecond(1)}, t0, buckets},
		{"fixed window", FixedWindow{Limit: 3, Window: 10 * time.Second}, w0, []edge{
			{0, 2, true, 1, 0, 10 * time.Second},
			{5e9, 2, false, 1, 5 * time.Second, 5 * time.Second},
			{10e9 - 1, 1, true, 0, 0, 1}, // the window's last ns
			{10e9 - 1, 1, false, 0, 1, 1},
			{10e9, 3, true, 0, 0, 10 * time.Second}, // the next one's first
		}},
		{"fixed window charging refusals", FixedWindow{Limit: 3, Window: 10 * time.Second, ChargeDenied: true}, w0, []edge{
			{0, 2, true, 1, 0, 10 * time.Second},
			{5e9, 2, false, 0, 5 * time.Second, 5 * time.Second}, // counted: 4 of 3
			{5e9, 0, false, 0, 5 * time.Second, 5 * time.Second}, // over: even a probe is refused, as in Envoy
			{10e9, 3, true, 0, 0, 10 * time.Second},
		}},
		{"sliding window", SlidingWindow{Limit: 10, Window: 10 * time.Second}, w0, []edge{
			{0, 4, true, 6, 0, 20 * time.Second},
			{10e9, 0, true, 6, 0, 10 * time.Second}, // rolled: the 4 weigh 4
			// 8 fit when 4·(1 − f) <= 2: half way, at 15 s
			{10e9, 8, false, 6, 5 * time.Second, 10 * time.Second},
			{15e9 - 1, 8, false, 7, 1, 5*time.Second + 1},
			{15e9, 8, true, 0, 0, 15 * time.Second},
			// [20 s, 30 s): the 8 weigh 8 ns at its last ns, nothing at 30 s
			{30e9 - 1, 10, false, 9, 1, 1},
			{30e9, 10, true, 0, 0, 20 * time.Second},
		}},
		{"sliding log", SlidingLog{Limit: 3, Window: 10 * time.Second}, w0, []edge{
			{0, 2, true, 1, 0, 10 * time.Second},
			{4e9, 1, true, 0, 0, 10 * time.Second},
			{5e9, 2, false, 0, 5 * time.Second, 9 * time.Second}, // the 2 at 0 s must go
			{10e9 - 1, 2, false, 0, 1, 4*time.Second + 1},
			{10e9, 2, true, 0, 0, 10 * time.Second}, // (now − window, now]: 0 s is out at 10 s
			{14e9, 1, true, 0, 0, 10 * time.Second},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEdges(t, c.alg, c.base, c.steps) })
	}
}

// TestBucketFullBehindItsClock: a full bucket is fresh (ResetAfter 0)
// also when the clock is behind the state's: the rollback adds no wait to
// a bucket nothing is missing from.
func TestBucketFullBehindItsClock(t *testing.T) {
	runEdges(t, TokenBucket{5, PerSecond(1)}, t0, []edge{
		{10e9, 0, true, 5, 0, 0},
		{9e9, 0, true, 5, 0, 0},
		{9e9, 5, true, 0, 0, 6 * time.Second},
	})
}
