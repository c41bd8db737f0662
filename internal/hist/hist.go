// Package hist is a fixed-bucket latency histogram that background loops
// update with atomics (no lock, no allocation) and a metrics endpoint
// reads when scraped. It knows nothing of Prometheus.
package hist

import (
	"sync/atomic"
	"time"
)

// Bounds are the bucket upper bounds every Histogram uses, from 1 ms to
// 60 s: emit latencies sit near the flush interval, staleness near the
// refresh interval, and both need their tail visible.
var Bounds = []time.Duration{
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute,
}

// Histogram counts observations per bucket. The zero value is ready.
type Histogram struct {
	counts [15]atomic.Uint64 // len(Bounds)+1: the last is +Inf
	sum    atomic.Int64      // nanoseconds
}

// Observe adds one duration (negative ones count as zero).
func (h *Histogram) Observe(d time.Duration) {
	d = max(d, 0)
	i := 0
	for i < len(Bounds) && d > Bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Snapshot is a histogram read at one moment: cumulative counts per bound
// (Prometheus' le buckets), the total count and the sum in seconds.
type Snapshot struct {
	Cumulative []uint64 // per Bounds[i]: observations <= it
	Count      uint64
	SumSeconds float64
}

// Snapshot reads h.
func (h *Histogram) Snapshot() Snapshot {
	s := Snapshot{Cumulative: make([]uint64, len(Bounds))}
	var run uint64
	for i := range Bounds {
		run += h.counts[i].Load()
		s.Cumulative[i] = run
	}
	s.Count = run + h.counts[len(Bounds)].Load()
	s.SumSeconds = time.Duration(h.sum.Load()).Seconds()
	return s
}
