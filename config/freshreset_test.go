package config

import (
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/limiter"
)

// TestFreshReset pins the formula per algorithm against the limiter's own
// answer for one hit on an empty state.
func TestFreshReset(t *testing.T) {
	now := int64(1_700_000_000)*int64(time.Second) + int64(17300*time.Millisecond)
	for _, alg := range []Algorithm{AlgEnvoy, AlgFixedWindow, AlgSlidingWindow, AlgTokenBucket,
		AlgLeakyBucket, AlgGCRA, AlgSlidingLog} {
		for _, limit := range []int64{1, 7, 1000, 1 << 40} {
			r := &Rule{Algorithm: alg, Limit: limit, Window: time.Minute}
			lim := alg.Limiter(limit, limit, time.Minute)
			var st limiter.State
			d, err := lim.AllowAt(&st, now, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.FreshReset(now); got != d.ResetAfter {
				t.Errorf("algorithm %q limit %d: FreshReset %v, the limiter's one hit %v", alg, limit, got, d.ResetAfter)
			}
		}
	}
	if got := (&Rule{Unlimited: true, Window: time.Minute}).FreshReset(now); got != 0 {
		t.Errorf("unlimited: %v", got)
	}
}
