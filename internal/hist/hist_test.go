package hist

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestBuckets(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, time.Second, time.Hour, -time.Second} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if s.Count != 6 || s.Cumulative[0] != 3 || s.Cumulative[1] != 4 || s.Cumulative[8] != 5 || s.Cumulative[len(Bounds)-1] != 5 {
		t.Fatalf("%+v", s)
	}
	if want := (time.Hour + time.Second + 3*time.Millisecond).Seconds(); s.SumSeconds != want {
		t.Fatalf("sum %v, want %v", s.SumSeconds, want)
	}
}

// TestCumulative: buckets never decrease and the last bound never exceeds
// the count, whatever is observed.
func TestCumulative(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var h Histogram
		ds := rapid.SliceOf(rapid.Int64Range(-1e9, 1e12)).Draw(t, "ds")
		for _, d := range ds {
			h.Observe(time.Duration(d))
		}
		s := h.Snapshot()
		if s.Count != uint64(len(ds)) {
			t.Fatalf("count %d of %d", s.Count, len(ds))
		}
		for i := 1; i < len(s.Cumulative); i++ {
			if s.Cumulative[i] < s.Cumulative[i-1] {
				t.Fatalf("bucket %d decreases: %v", i, s.Cumulative)
			}
		}
		if s.Cumulative[len(s.Cumulative)-1] > s.Count {
			t.Fatal("more in the buckets than observed")
		}
	})
}
