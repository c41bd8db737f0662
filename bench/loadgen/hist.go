package loadgen

import (
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: 2^(subBits-1) = 64 buckets per
// power of two, so a recorded value is off by less than 1/64 (1.6 %).
const subBits = 7

// Histogram is a log-linear latency histogram in the manner of HDR
// histograms: exact below 128 ns, then 64 buckets per power of two up to
// 2^63 ns. Recording is a few instructions and never allocates. The zero
// value is ready; it is not safe for concurrent use (each caller keeps
// its own and they are merged at the end).
type Histogram struct {
	counts [(64-subBits+2)<<(subBits-1) + 1]uint64
	n      uint64
	max    int64
}

// bucket is the index of the bucket holding v (≥ 0).
func bucket(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - subBits // ≥ 1: v>>e has subBits bits
	return e<<(subBits-1) + int(v>>e)
}

// lowest is the smallest value of bucket i.
func lowest(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	e := i>>(subBits-1) - 1
	m := uint64(i&(1<<(subBits-1)-1) | 1<<(subBits-1))
	return m << e
}

// Record adds one latency (negative ones count as 0).
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucket(uint64(v))]++
	h.n++
	h.max = max(h.max, v)
}

// Merge adds o's recordings to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count is the number of recordings.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recording, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the latency at or below which a fraction q (0..1) of
// the recordings fall: the upper end of the bucket that holds it (never
// above Max), 0 with no recordings.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			upper := lowest(i+1) - 1
			return time.Duration(min(int64(upper), h.max))
		}
	}
	return time.Duration(h.max)
}
