package limiter

import (
	"errors"
	"time"
)

// windowStart returns the start of the window of length w containing now,
// aligned to the Unix epoch (as Envoy's ratelimit service aligns to the unit).
func windowStart(now, w int64) int64 {
	m := now % w
	if m < 0 {
		m += w
	}
	return now - m
}

func validateWindow(name string, limit int64, w time.Duration) error {
	if limit <= 0 {
		return &ParamError{Algorithm: name, Field: "Limit", Reason: "must be > 0"}
	}
	if w <= 0 {
		return &ParamError{Algorithm: name, Field: "Window", Reason: "must be > 0"}
	}
	if int64(w) > maxSpan/2 {
		return &ParamError{Algorithm: name, Field: "Window", Reason: "must be at most 50 years"}
	}
	return nil
}

// FixedWindow admits up to Limit per window of length Window, windows
// aligned to the Unix epoch. With ChargeDenied every call is counted, also
// a refused one and one whose cost exceeds Limit (it is then refused with
// [Never] and a [CostError]): that is the semantics of Envoy's ratelimit
// service, where a client hammering a limit keeps its counter over. The zero
// State is an empty window.
type FixedWindow struct {
	Limit        int64
	Window       time.Duration
	ChargeDenied bool
}

// Validate implements [Algorithm].
func (f FixedWindow) Validate() error { return validateWindow("fixed_window", f.Limit, f.Window) }

// Max implements [Algorithm].
func (f FixedWindow) Max() int64 { return f.Limit }

// current returns the window start and count of s at now; a clock behind
// the state's window stays in that window.
func (f FixedWindow) current(s *State, now int64) (start, count int64) {
	ws := windowStart(now, int64(f.Window))
	if !s.set || ws > s.at {
		return ws, 0
	}
	return s.at, s.v
}

// AllowAt implements [Algorithm].
func (f FixedWindow) AllowAt(s *State, now, cost int64) (d Decision, err error) {
	err = f.decide(s, now, cost, &d)
	return d, err
}

func (f FixedWindow) decide(s *State, now, cost int64, d *Decision) error {
	// Under ChargeDenied a cost above the limit is still counted.
	err := checkCost(now, cost, f.Limit, d)
	if err != nil && !(f.ChargeDenied && errors.Is(err, ErrCostExceedsLimit)) {
		return err
	}
	start, count := f.current(s, now)
	end := start + int64(f.Window)
	d.ResetAfter = dur(end - now)
	switch {
	case err != nil:
		d.RetryAfter = Never
	case count <= f.Limit-cost:
		d.Allowed = true
	default:
		d.RetryAfter = dur(end - now)
	}
	if d.Allowed || f.ChargeDenied {
		count = satAdd(count, cost)
		s.set, s.at, s.v = true, start, count
	}
	if count < f.Limit {
		d.Remaining = f.Limit - count
	}
	if count == 0 {
		d.ResetAfter = 0
	}
	return err
}

// satAdd adds non-negative values, saturating at the int64 maximum.
func satAdd(a, b int64) int64 {
	if a > 1<<63-1-b {
		return 1<<63 - 1
	}
	return a + b
}

func (f FixedWindow) settle(s *State, now int64) {
	if s.set {
		s.at, s.v = f.current(s, now)
	}
}

// adopt keeps the count of the current window: editing a limit keeps the
// count, as the shared counters do. A changed window length restarts at the
// window containing the old one's start.
func (f FixedWindow) adopt(s *State, _ Algorithm, _ int64) {
	if s.set {
		s.at = windowStart(s.at, int64(f.Window))
	}
}

func (f FixedWindow) idleAt(s *State) int64 {
	if !s.set || s.v == 0 {
		return 0
	}
	return s.at + int64(f.Window)
}

// restore treats the key as exhausted until idleAt: its window is full.
func (f FixedWindow) restore(s *State, idleAt, now int64) {
	if idleAt <= now {
		return
	}
	start := windowStart(now, int64(f.Window))
	s.set, s.at, s.v = true, start, f.Limit
}

// SlidingWindow is the sliding window counter: it keeps the count of the
// current and the previous fixed window and estimates the count over the
// last Window as previous × (unelapsed fraction of the current window) +
// current, admitting while that estimate plus cost stays within Limit. All
// arithmetic is integer (the comparison is scaled by Window). The zero State
// is empty.
type SlidingWindow struct {
	Limit  int64
	Window time.Duration
}

// Validate implements [Algorithm].
func (w SlidingWindow) Validate() error {
	return validateWindow("sliding_window", w.Limit, w.Window)
}

// Max implements [Algorithm].
func (w SlidingWindow) Max() int64 { return w.Limit }

// current returns start, current and previous counts of s at now.
func (w SlidingWindow) current(s *State, now int64) (start, cur, prev int64) {
	W := int64(w.Window)
	ws := windowStart(now, W)
	switch {
	case !s.set || ws > s.at+W:
		return ws, 0, 0
	case ws == s.at+W:
		return ws, 0, s.v
	}
	return s.at, s.v, s.prev // same window, or a clock behind it
}

// AllowAt implements [Algorithm].
func (w SlidingWindow) AllowAt(s *State, now, cost int64) (d Decision, err error) {
	err = w.decide(s, now, cost, &d)
	return d, err
}

func (w SlidingWindow) decide(s *State, now, cost int64, d *Decision) error {
	if err := checkCost(now, cost, w.Limit, d); err != nil {
		return err
	}
	W := int64(w.Window)
	start, cur, prev := w.current(s, now)
	e := now - start
	if e < 0 {
		e = 0
	}
	// weighted(prev) = prev·(W−e) in units of 1/W requests.
	weighted := mul(prev, W-e)
	if cur <= w.Limit-cost && weighted.cmp(mul(w.Limit-cur-cost, W)) <= 0 {
		d.Allowed = true
		cur += cost
		s.set, s.at, s.v, s.prev = true, start, cur, prev
	} else {
		d.RetryAfter = dur(w.retry(start, cur, prev, cost, now))
	}
	if room := mul(w.Limit-min(cur, w.Limit), W); weighted.cmp(room) < 0 {
		rem, _, _ := room.sub(weighted).div(W)
		d.Remaining = rem
	}
	switch {
	case cur > 0:
		d.ResetAfter = dur(start + 2*W - now)
	case prev > 0:
		d.ResetAfter = dur(start + W - now)
	}
	return nil
}

// retry returns when cost fits: later in this window while the previous
// window's weight decays, or in the next window where this one's count
// becomes the decaying previous.
func (w SlidingWindow) retry(start, cur, prev, cost, now int64) int64 {
	W := int64(w.Window)
	if cur <= w.Limit-cost { // prev > 0 here
		// smallest e' with prev·(W−e') <= (Limit−cur−cost)·W, counted
		// from now: a clock behind the window's start waits for it too
		q, _, _ := mul(w.Limit-cur-cost, W).div(prev)
		return start + W - q - now
	}
	// next window: cur becomes prev; smallest e'' with cur·(W−e'') <= (Limit−cost)·W
	q, _, _ := mul(w.Limit-cost, W).div(cur)
	wait := start + W - now
	if q < W {
		wait += W - q
	}
	return wait
}

func (w SlidingWindow) settle(s *State, now int64) {
	if s.set {
		s.at, s.v, s.prev = w.current(s, now)
	}
}

func (w SlidingWindow) adopt(s *State, _ Algorithm, _ int64) {
	if s.set {
		s.at = windowStart(s.at, int64(w.Window))
	}
}

func (w SlidingWindow) idleAt(s *State) int64 {
	switch {
	case !s.set:
		return 0
	case s.v > 0:
		return s.at + 2*int64(w.Window)
	case s.prev > 0:
		return s.at + int64(w.Window)
	}
	return 0
}

// restore marks the window that idleAt retires as full: the current window
// when idleAt lies beyond its end, else the previous one. Either is at least
// as restrictive as the evicted state, whose counts never exceeded Limit.
func (w SlidingWindow) restore(s *State, idleAt, now int64) {
	if idleAt <= now {
		return
	}
	W := int64(w.Window)
	start := windowStart(now, W)
	s.set, s.at, s.v, s.prev = true, start, w.Limit, 0
	if idleAt <= start+W { // only the previous window can still count
		s.at, s.v, s.prev = start, 0, w.Limit
	}
}

// refund takes cost out of the current window's count.
func (f FixedWindow) refund(s *State, now, cost int64) {
	if s.set && s.at == windowStart(now, int64(f.Window)) {
		s.v = max(0, s.v-cost)
	}
}

// refund takes cost out of the window it was counted in: the current one,
// or the previous one if the window rolled since.
func (w SlidingWindow) refund(s *State, now, cost int64) {
	if !s.set {
		return
	}
	W := int64(w.Window)
	switch ws := windowStart(now, W); {
	case ws == s.at:
		s.v = max(0, s.v-cost)
	case ws == s.at+W: // rolled: the charge is now the previous window
		s.at, s.prev, s.v = ws, max(0, s.v-cost), 0
	}
}
