// Package skewclock keeps a clock within a bound of a reference clock
// read now and then (the counter store's): a checker's window starts and
// elapsed times come from it, so a checker whose clock runs ahead cannot
// open a window early (nor late behind).
package skewclock

import (
	"sync/atomic"
	"time"
)

// Clock is a base clock moved, when it strays further than the bound
// from the reference, to the bound's edge. Safe for concurrent use.
type Clock struct {
	base interface{ Now() int64 }
	adj  atomic.Int64 // ns added to base
	// skew is the reference minus base at the last reading (ns, measured
	// at the middle of the call), for metrics.
	skew atomic.Int64
}

// New returns base, unadjusted until the first Learn.
func New(base interface{ Now() int64 }) *Clock { return &Clock{base: base} }

// Now is the adjusted time, unix ns.
func (c *Clock) Now() int64 { return c.base.Now() + c.adj.Load() }

// Base is the base clock's time, unix ns: the one to time a reading of
// the reference with.
func (c *Clock) Base() int64 { return c.base.Now() }

// Learn takes a reading of the reference, ref, made between base times t1
// and t2: the clock is clamped to the reference ± bound.
func (c *Clock) Learn(ref, t1, t2 int64, bound time.Duration) {
	off := ref - (t1+t2)/2
	c.skew.Store(off)
	m := int64(bound)
	switch {
	case off > m:
		c.adj.Store(off - m)
	case off < -m:
		c.adj.Store(off + m)
	default:
		c.adj.Store(0)
	}
}

// Skew is the reference minus the base clock at the last reading.
func (c *Clock) Skew() time.Duration { return time.Duration(c.skew.Load()) }

// Adjustment is what Now adds to the base clock (non-zero past the bound).
func (c *Clock) Adjustment() time.Duration { return time.Duration(c.adj.Load()) }
