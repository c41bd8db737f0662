package limiter

import "time"

// MaxSlidingLogLimit bounds a [SlidingLog] limit: the log keeps one entry
// per admitted request inside the window, so memory per key grows with it.
const MaxSlidingLogLimit = 1 << 20

// SlidingLog keeps the time and cost of every admitted request of the last
// Window and admits a request if the costs logged in (now − Window, now]
// plus its own stay within Limit: exact in every window of that length, at
// a memory cost of one 16-byte entry per admitted request. The zero State
// is an empty log.
type SlidingLog struct {
	Limit  int64
	Window time.Duration
}

// slog is a FIFO of admitted hits, oldest first, with their cost sum.
type slog struct {
	ts, cost []int64
	head     int
	sum      int64
}

// Validate implements [Algorithm].
func (l SlidingLog) Validate() error {
	if err := validateWindow("sliding_log", l.Limit, l.Window); err != nil {
		return err
	}
	if l.Limit > MaxSlidingLogLimit {
		return &ParamError{Algorithm: "sliding_log", Field: "Limit", Reason: "must be at most 1048576 (one log entry per admitted request)"}
	}
	return nil
}

// Max implements [Algorithm].
func (l SlidingLog) Max() int64 { return l.Limit }

// expire drops entries at or before now − Window.
func (g *slog) expire(now, w int64) {
	for g.head < len(g.ts) && g.ts[g.head] <= now-w {
		g.sum -= g.cost[g.head]
		g.head++
	}
	if g.head == len(g.ts) {
		g.ts, g.cost, g.head = g.ts[:0], g.cost[:0], 0
	} else if g.head > 64 && g.head*2 > len(g.ts) { // compact
		n := copy(g.ts, g.ts[g.head:])
		copy(g.cost, g.cost[g.head:])
		g.ts, g.cost, g.head = g.ts[:n], g.cost[:n], 0
	}
}

func (g *slog) newest() int64 { return g.ts[len(g.ts)-1] }

// AllowAt implements [Algorithm].
func (l SlidingLog) AllowAt(s *State, now, cost int64) (d Decision, err error) {
	err = l.decide(s, now, cost, &d)
	return d, err
}

func (l SlidingLog) decide(s *State, now, cost int64, d *Decision) error {
	if err := checkCost(now, cost, l.Limit, d); err != nil {
		return err
	}
	W := int64(l.Window)
	if s.log == nil {
		s.log = &slog{}
	}
	g := s.log
	// s.at is the latest time the log was expired at; a clock behind it
	// stands still there, so nothing expired is ever counted again.
	if s.set && now < s.at {
		now = s.at
	}
	s.set, s.at = true, now
	g.expire(now, W)
	if g.sum <= l.Limit-cost {
		d.Allowed = true
		if cost > 0 {
			g.ts, g.cost = append(g.ts, now), append(g.cost, cost)
			g.sum += cost
		}
	} else {
		// the oldest entries must expire until cost fits
		free := l.Limit - g.sum
		i := g.head
		for ; free < cost; i++ {
			free += g.cost[i]
		}
		d.RetryAfter = dur(g.ts[i-1] + W - now)
	}
	d.Remaining = max(l.Limit-g.sum, 0) // a forced charge may log more than the limit
	if g.head < len(g.ts) {
		d.ResetAfter = dur(g.newest() + W - now)
	}
	return nil
}

func (l SlidingLog) settle(s *State, now int64) {
	if s.log != nil && now > s.at {
		s.at = now
		s.log.expire(now, int64(l.Window))
	}
}

// adopt keeps the log whole: under a lowered limit the key refuses until
// enough of what it already admitted has expired.
func (l SlidingLog) adopt(*State, Algorithm, int64) {}

func (l SlidingLog) idleAt(s *State) int64 {
	if s.log == nil || s.log.head == len(s.log.ts) {
		return 0
	}
	return s.log.newest() + int64(l.Window)
}

// restore logs the whole limit at idleAt − Window, so the key is full until
// idleAt.
func (l SlidingLog) restore(s *State, idleAt, now int64) {
	if idleAt <= now {
		return
	}
	at := idleAt - int64(l.Window)
	if at > now {
		at = now
	}
	s.set, s.at, s.log = true, now, &slog{ts: []int64{at}, cost: []int64{l.Limit}, sum: l.Limit}
}

// clone returns a deep copy of g (nil for nil).
func (g *slog) clone() *slog {
	if g == nil {
		return nil
	}
	c := &slog{head: 0, sum: g.sum}
	c.ts = append([]int64(nil), g.ts[g.head:]...)
	c.cost = append([]int64(nil), g.cost[g.head:]...)
	return c
}

// refund removes the newest logged hit of exactly cost.
func (l SlidingLog) refund(s *State, _, cost int64) {
	g := s.log
	if g == nil {
		return
	}
	for i := len(g.ts) - 1; i >= g.head; i-- {
		if g.cost[i] == cost {
			copy(g.ts[i:], g.ts[i+1:])
			copy(g.cost[i:], g.cost[i+1:])
			g.ts, g.cost = g.ts[:len(g.ts)-1], g.cost[:len(g.cost)-1]
			g.sum -= cost
			return
		}
	}
}
