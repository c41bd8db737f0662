package checker

import (
	"testing"
	"time"
)

// TestBandWidth pins the near band's width and the prediction of the
// others' in-flight hits (docs/design.md): threshold = max(near_floor,
// limit × near_floor_percent / 100, rate × (min_refresh + pipeline_lag) ×
// safety_percent / 100), with rate the fleet's — the learned rates, this
// instance's live rate taken for every instance when it is faster, and a
// burst in progress counted at once for every instance — and in flight =
// the others' rate × pipeline_lag. Defaults: 50 ms + 250 ms at 200 %, so
// rate × 0.6 s.
func TestBandWidth(t *testing.T) {
	ms := int64(time.Millisecond)
	cases := []struct {
		name                string
		e                   entry
		ceiling             int64
		threshold, inFlight int64
	}{
		{"nothing learned: the floor", entry{instances: 1}, 100, 2, 0},
		{"nothing learned: the percentage", entry{instances: 1}, 1000, 10, 0},
		{"learned rates", entry{instances: 2, othersRate: 100, ownRate: 50}, 1000, 90, 25},
		{"this instance faster: every instance as fast", entry{instances: 3, othersRate: 100, live: 200}, 1000, 360, 25},
		// 50 hits in 10 ms, two instances: 10,000 a second for 0.6 s
		{"a burst in progress", entry{instances: 2, liveHits: 50, liveFrom: t0, used: t0 + 10*ms}, 1000, 6000, 0},
	}
	r := newRig(t, Config{})
	for _, c := range cases {
		if got := r.c.threshold(&c.e, c.ceiling); got != c.threshold {
			t.Fatalf("%s: threshold %d, want %d", c.name, got, c.threshold)
		}
		if got := r.c.inFlight(&c.e); got != c.inFlight {
			t.Fatalf("%s: in flight %d, want %d", c.name, got, c.inFlight)
		}
	}
}
