package rates

import (
	"testing"

	"pgregory.net/rapid"
)

// TestSlicesNeverSumAboveWhatRemained: for any fleet whose views of the
// rates agree, the slices cut from what remained add up to at most it;
// cold slices (the ceiling divided by the live checkers) add up to at
// most the ceiling; no instance gets nothing while something remains for
// n or more.
func TestSlicesNeverSumAboveWhatRemained(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(2, 16).Draw(rt, "instances")
		remaining := rapid.Int64Range(0, 1<<40).Draw(rt, "remaining")
		rs := make([]int64, n)
		var fleet int64
		for i := range rs {
			rs[i] = rapid.Int64Range(0, 1<<30).Draw(rt, "rate")
			fleet += rs[i]
		}
		var sum int64
		for i := range rs {
			s := Cut(remaining, int64(n), rs[i], fleet)
			if s < 0 || (remaining >= int64(2*n) && s == 0) {
				rt.Fatalf("instance %d: slice %d of %d", i, s, remaining)
			}
			sum += s
		}
		if sum > remaining {
			rt.Fatalf("%d slices add up to %d, above the %d that remained (rates %v)", n, sum, remaining, rs)
		}
		if cold := (remaining / int64(n)) * int64(n); cold > remaining {
			rt.Fatalf("cold slices %d above %d", cold, remaining)
		}
	})
}

// TestLag: the lag is the age of the newest sample the store's count of
// this instance holds; samples of another window, or of nothing counted,
// prove nothing.
func TestLag(t *testing.T) {
	const lag = 100
	var l Lag
	steps := []struct {
		now, window, counted, own int64
		want                      int64
		ok                        bool
	}{
		{1000, 1, 0, 0, 0, false},   // nothing counted: no proof
		{1050, 1, 10, 0, 0, false},  // the store holds none of it yet
		{1120, 1, 25, 10, 70, true}, // holds the sample of 1050
		{1130, 1, 30, 25, 10, true}, // holds the sample of 1120 (kept: 70 ≥ lag/2)
		{1200, 2, 5, 0, 0, false},   // a new window: the old samples go
		{1260, 2, 9, 5, 60, true},   // holds the new window's first sample
	}
	for i, s := range steps {
		got, ok := l.Measure(s.now, s.window, s.counted, s.own, lag)
		if got != s.want || ok != s.ok {
			t.Fatalf("step %d: lag %d %v, want %d %v", i, got, ok, s.want, s.ok)
		}
	}
}

func TestMulDiv(t *testing.T) {
	for _, c := range []struct{ a, b, c, want int64 }{
		{10, 3, 4, 7}, {1 << 62, 1e9, 2e9, 1 << 61}, {1 << 62, 1 << 62, 1, 1<<63 - 1}, {0, 5, 3, 0},
	} {
		if got := MulDiv(c.a, c.b, c.c); got != c.want {
			t.Fatalf("MulDiv(%d, %d, %d) = %d, want %d", c.a, c.b, c.c, got, c.want)
		}
	}
}
