package limiter

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// FuzzAlgorithms decodes parameters and a sequence of (time step, cost)
// operations from bytes and checks that no input panics, overflows or
// breaks the remaining/limit invariants.
func FuzzAlgorithms(f *testing.F) {
	f.Add([]byte{0, 5, 3, 1, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{6, 1, 1, 255, 255, 255, 255, 255, 255, 255, 127, 2, 0, 0, 0, 0, 0, 0, 0, 128, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		kind, limit, tokens, pexp := data[0]%6, int64(data[1])+1, int64(data[2]), data[3]%40
		period := time.Duration(1) << pexp
		algs := []Algorithm{
			TokenBucket{limit, Rate{tokens, period}}, GCRA{limit, Rate{tokens, period}},
			LeakyBucket{limit, Rate{tokens, period}}, FixedWindow{Limit: limit, Window: period},
			SlidingWindow{Limit: limit, Window: period}, SlidingLog{Limit: limit, Window: period},
		}
		alg := algs[kind]
		if alg.Validate() != nil {
			return
		}
		var s State
		now := t0
		for rest := data[4:]; len(rest) >= 9; rest = rest[9:] {
			now += int64(binary.LittleEndian.Uint64(rest)) >> 2
			inRange := now >= 0 && now <= MaxTime
			cost := int64(int8(rest[8]))
			d, err := alg.AllowAt(&s, now, cost)
			if !inRange {
				if !errors.Is(err, ErrTimeRange) {
					t.Fatalf("time %d outside the range: got %v", now, err)
				}
				now = t0
				continue
			}
			if err == nil && (d.Remaining < 0 || d.Remaining > d.Limit) {
				t.Fatalf("remaining %d outside [0, %d]", d.Remaining, d.Limit)
			}
			if d.Allowed && d.RetryAfter != 0 {
				t.Fatalf("allowed with retry %v", d.RetryAfter)
			}
			if !d.Allowed && err == nil && d.RetryAfter == 0 {
				t.Fatalf("refused with no retry")
			}
		}
	})
}
