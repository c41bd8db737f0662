package skewclock

import (
	"testing"
	"time"
)

type fixed int64

func (f fixed) Now() int64 { return int64(f) }

// TestLearn: within the bound the clock is its base; beyond it, it moves
// to the bound's edge, ahead or behind, measured at the middle of the
// reading.
func TestLearn(t *testing.T) {
	const base = int64(1_000_000_000)
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		ref, t1, t2 int64
		skew, adj   time.Duration
	}{
		{base + 50*ms, base - 10*ms, base + 10*ms, 50 * time.Millisecond, 0},
		{base + 5000*ms, base, base, 5 * time.Second, 4900 * time.Millisecond},
		{base - 300*ms, base - 20*ms, base + 20*ms, -300 * time.Millisecond, -200 * time.Millisecond},
	} {
		k := New(fixed(base))
		k.Learn(c.ref, c.t1, c.t2, 100*time.Millisecond)
		if k.Skew() != c.skew || k.Adjustment() != c.adj || k.Now() != base+int64(c.adj) || k.Base() != base {
			t.Fatalf("reference %d: skew %v adj %v now %d, want %v %v", c.ref, k.Skew(), k.Adjustment(), k.Now(), c.skew, c.adj)
		}
	}
}
