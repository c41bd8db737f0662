package limiter

import (
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
