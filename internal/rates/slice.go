package rates

import (
	"math"
	"math/bits"
)

// Slice is an instance's share of a key near its limit under
// `near_limit: async`: what it may spend (Mine), and has spent, since the
// slice was cut (At, unix ns) in Window (window keys: a new window starts
// cold).
type Slice struct {
	At, Window, Mine, Spent int64
}

// lagSamples is how many samples a Lag keeps, one per half pipeline lag
// at most: a lag above lagSamples/2 × the pipeline lag is not measured.
const lagSamples = 8

// sample is what this instance had counted in a window at a moment: when
// a store answer holds it, the pipeline's lag is at most its age.
type sample struct{ at, counted int64 }

// Lag measures the pipeline's lag on this instance's own consumption.
type Lag struct {
	samples [lagSamples]sample
	n       int
	window  int64
}

// Measure records a sample of what this instance counted in window
// (counted) and reports how far behind the store's answer (own: its count
// of this instance in the window) is: the age of the newest sample it
// holds, given the expected lag. False when it holds none: the pipeline
// lags more than the samples span, or this instance has counted nothing
// it could measure with.
func (l *Lag) Measure(now, window, counted, own, lag int64) (int64, bool) {
	if l.window != window {
		l.window, l.n = window, 0
	}
	if l.n == 0 || now-l.samples[(l.n-1)%lagSamples].at >= lag/2 {
		l.samples[l.n%lagSamples] = sample{at: now, counted: counted}
		l.n++
	}
	for i := l.n - 1; i >= max(0, l.n-lagSamples); i-- {
		// (a sample of nothing counted proves nothing about the pipeline)
		if sm := l.samples[i%lagSamples]; sm.counted > 0 && sm.counted <= own {
			return now - sm.at, true
		}
	}
	return 0, false
}

// Cut is one instance's slice of remaining among n instances, own of the
// fleet's rate fleet (0: unknown, equal shares). The share is half an
// equal split and half this instance's rate over the fleet's, both
// learned from store answers: when the instances' views agree, the shares
// add up to one, and none starves while its rate is still unknown.
func Cut(remaining, n, own, fleet int64) int64 {
	if fleet <= 0 || own > fleet {
		return remaining / n
	}
	return remaining/(2*n) + MulDiv(remaining, own, 2*fleet)
}

// MulDiv is a × b / c rounded down, without overflow for non-negative
// values (math.MaxInt64 when the quotient does not fit): room × 1 s over
// a rate, for a limit near the int64 bound.
func MulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, math.MaxInt64))
}
