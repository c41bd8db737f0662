package checker

import (
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
)

// freshReset is the reset a counter of r reports while it is fresh (empty
// window, full bucket, empty log: the algorithms' own ResetAfter is then
// 0, nothing to forget): when a hit charged now would be forgotten, which
// is what a request of one hit reports. A probe (hits 0) of a fresh key
// then says when its window or bucket would reset, as the request after
// it will, rather than 0:
//
//   - fixed windows and Envoy's: the end of the window containing now
//     (windows aligned to the Unix epoch);
//   - sliding_window: the end of the next window, where a hit of this one
//     stops weighing;
//   - sliding_log: one window from now;
//   - token_bucket, leaky_bucket, gcra: one hit's refill, window / limit
//     rounded up.
func freshReset(r *config.Rule, now int64) time.Duration {
	W := int64(r.Window)
	if W <= 0 || r.Unlimited {
		return 0
	}
	into := now - limiter.WindowStart(now, W)
	switch {
	case r.Algorithm == config.AlgSlidingWindow:
		return time.Duration(2*W - into)
	case r.Algorithm == config.AlgSlidingLog:
		return r.Window
	case r.Algorithm.Bucket():
		return time.Duration(counters.Span(1, W, max(r.Limit, 1)))
	}
	return time.Duration(W - into)
}
