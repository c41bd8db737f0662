package loadgen

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestBucketsAreContiguous: every value lands in a bucket whose range
// holds it, buckets are ordered, and a bucket is at most 1/64 wide.
func TestBucketsAreContiguous(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		v := rapid.Uint64Range(0, 1<<62).Draw(rt, "v")
		i := bucket(v)
		lo, hi := lowest(i), lowest(i+1)
		if v < lo || v >= hi {
			rt.Fatalf("value %d in bucket %d [%d, %d)", v, i, lo, hi)
		}
		if lo >= 128 && float64(hi-lo) > float64(lo)/64 {
			rt.Fatalf("bucket %d [%d, %d) wider than 1/64", i, lo, hi)
		}
	})
	for v := uint64(0); v < 1<<16; v++ {
		if i := bucket(v); lowest(i) > v || lowest(i+1) <= v {
			t.Fatalf("value %d: bucket %d [%d, %d)", v, i, lowest(i), lowest(i+1))
		}
	}
}

// TestQuantilesAgainstSorting compares the histogram's quantiles with the
// exact ones of the same random sample: within the bucket precision.
func TestQuantilesAgainstSorting(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var all []int64
	for range 100_000 {
		v := int64(r.ExpFloat64() * float64(2*time.Millisecond))
		all = append(all, v)
		h.Record(time.Duration(v))
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := all[int(q*float64(len(all)))-1]
		got := int64(h.Quantile(q))
		if got < exact || float64(got-exact) > float64(exact)/50 {
			t.Fatalf("q%v: got %v, exact %v", q, time.Duration(got), time.Duration(exact))
		}
	}
	if h.Max() != time.Duration(all[len(all)-1]) || h.Count() != 100_000 {
		t.Fatalf("max %v count %d", h.Max(), h.Count())
	}
	var empty Histogram
	if empty.Quantile(0.99) != 0 {
		t.Fatal("empty histogram has a quantile")
	}
	var neg Histogram
	neg.Record(-time.Second)
	if neg.Quantile(1) != 0 {
		t.Fatal("a negative latency is not 0")
	}
}
