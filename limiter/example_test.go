package limiter_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/limiter"
)

// t0 is an instant aligned to the minute, so the windows below start at it.
var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()

// A token bucket of 2 refilled at 1 per second, decided at explicit times:
// the state is the caller's, nothing reads a clock.
func ExampleTokenBucket() {
	b := limiter.TokenBucket{Capacity: 2, Refill: limiter.PerSecond(1)}
	var s limiter.State
	for _, at := range []time.Duration{0, 0, 0, 400 * time.Millisecond, time.Second} {
		d, _ := b.AllowAt(&s, t0+int64(at), 1)
		fmt.Printf("%v: allowed %v, remaining %d, retry after %v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// 0s: allowed true, remaining 1, retry after 0s
	// 0s: allowed true, remaining 0, retry after 0s
	// 0s: allowed false, remaining 0, retry after 1s
	// 400ms: allowed false, remaining 0, retry after 600ms
	// 1s: allowed true, remaining 0, retry after 0s
}

// A sliding window counter of 10 per minute: a minute after a full
// window, the previous window still weighs in proportion to what is left
// of the current one.
func ExampleSlidingWindow() {
	w := limiter.SlidingWindow{Limit: 10, Window: time.Minute}
	var s limiter.State
	d, _ := w.AllowAt(&s, t0, 10)
	fmt.Println("t0, 10 hits: allowed", d.Allowed)
	for _, at := range []time.Duration{time.Minute, 90 * time.Second} {
		d, _ = w.AllowAt(&s, t0+int64(at), 5)
		fmt.Printf("t0+%v, 5 hits: allowed %v, remaining %d, retry after %v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	_, err := w.AllowAt(&s, t0, 11)
	fmt.Println("11 hits:", err, errors.Is(err, limiter.ErrCostExceedsLimit))
	// Output:
	// t0, 10 hits: allowed true
	// t0+1m0s, 5 hits: allowed false, remaining 0, retry after 30s
	// t0+1m30s, 5 hits: allowed true, remaining 0, retry after 0s
	// 11 hits: limiter: cost 11 exceeds limit 10 and can never be admitted true
}

// Keyed runs one algorithm per key; a request id makes a retry get the
// first answer without being charged again.
func ExampleKeyed() {
	k, err := limiter.NewKeyed(limiter.WithIdempotency(time.Minute, 1024))
	if err != nil {
		panic(err)
	}
	var perUser limiter.Algorithm = limiter.FixedWindow{Limit: 2, Window: time.Minute} // built once: no allocation per call
	for _, id := range []string{"req-1", "req-1", "req-2", "req-3"} {
		d, _ := k.AllowAt("user_id=priya", perUser, t0, 1, id)
		fmt.Printf("%s: allowed %v, remaining %d\n", id, d.Allowed, d.Remaining)
	}
	d, _ := k.AllowAt("user_id=omar", perUser, t0, 1, "")
	fmt.Println("another key: allowed", d.Allowed)
	// Output:
	// req-1: allowed true, remaining 1
	// req-1: allowed true, remaining 1
	// req-2: allowed true, remaining 0
	// req-3: allowed false, remaining 0
	// another key: allowed true
}

// SlidingCounts is the sliding window's arithmetic on counts kept
// elsewhere: 8 hits in the previous minute and 3 in this one, 45 s in,
// estimate 8 × 15/60 + 3 = 5 of a limit of 10.
func ExampleSlidingCounts() {
	c := limiter.SlidingCounts{Prev: 8, Cur: 3, Elapsed: int64(45 * time.Second), Window: int64(time.Minute)}
	fmt.Println("2 fit:", c.Fits(10, 2), "6 fit:", c.Fits(10, 6))
	fmt.Println("remaining:", c.Remaining(10))
	fmt.Println("6 fit after:", time.Duration(c.RetryAfter(10, 6)))
	fmt.Println("empty after:", time.Duration(c.ResetAfter()))
	fmt.Println("the window of t0+90s starts at t0 +", time.Duration(limiter.WindowStart(t0+int64(90*time.Second), int64(time.Minute))-t0))
	// Output:
	// 2 fit: true 6 fit: false
	// remaining: 5
	// 6 fit after: 7.5s
	// empty after: 1m15s
	// the window of t0+90s starts at t0 + 1m0s
}
