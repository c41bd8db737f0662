package rates

import (
	"testing"
	"time"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

// defaults is the checker's default band: near_floor 2, near_floor_percent
// 1, (min_refresh 50 ms + pipeline_lag 250 ms) × safety_percent 200 %.
var defaults = Band{Floor: 2, FloorPercent: 1, Cover: 600 * time.Millisecond}

// TestBandWidth pins the near band's width and the prediction of the
// others' in-flight hits (docs/design.md): threshold = max(near_floor,
// limit × near_floor_percent / 100, rate × (min_refresh + pipeline_lag) ×
// safety_percent / 100), with rate the fleet's — the learned rates, this
// instance's live rate taken for every instance when it is faster, and a
// burst in progress counted at once for every instance — and in flight =
// the others' rate × pipeline_lag (250 ms).
func TestBandWidth(t *testing.T) {
	ms := int64(time.Millisecond)
	cases := []struct {
		name                string
		r                   Rates
		used, ceiling       int64
		threshold, inFlight int64
	}{
		{"nothing learned: the floor", Rates{Instances: 1}, 0, 100, 2, 0},
		{"nothing learned: the percentage", Rates{Instances: 1}, 0, 1000, 10, 0},
		{"learned rates", Rates{Instances: 2, Others: 100, Own: 50}, 0, 1000, 90, 25},
		{"this instance faster: every instance as fast", Rates{Instances: 3, Others: 100, live: 200}, 0, 1000, 360, 25},
		// 50 hits in 10 ms, two instances: 10,000 a second for 0.6 s
		{"a burst in progress", Rates{Instances: 2, liveHits: 50, liveFrom: t0}, t0 + 10*ms, 1000, 6000, 0},
	}
	for _, c := range cases {
		if got := c.r.Threshold(defaults, c.used, c.ceiling); got != c.threshold {
			t.Fatalf("%s: threshold %d, want %d", c.name, got, c.threshold)
		}
		if got := c.r.InFlight(250 * time.Millisecond); got != c.inFlight {
			t.Fatalf("%s: in flight %d, want %d", c.name, got, c.inFlight)
		}
	}
}

// TestLearn: the first answer is a baseline; each later one at least
// Span after it averages the measured rate in; before any other instance
// has been seen, each is assumed as fast as this one.
func TestLearn(t *testing.T) {
	var r Rates
	ms := int64(time.Millisecond)
	steps := []struct {
		at, others, own int64
		instances       int
		wantOthers      int64
		wantOwn         int64
		wantTaught      bool
	}{
		{t0, 0, 0, 2, 0, 0, false},
		{t0 + 5*ms, 100, 100, 2, 0, 0, false},   // too soon: no rate
		{t0 + 100*ms, 0, 40, 2, 200, 200, true}, // own 400/s → 200; others 0 → assumed own × 1
		{t0 + 200*ms, 50, 80, 2, (200 + 500) / 2, (200 + 400) / 2, true},
	}
	for i, s := range steps {
		r.Learn(s.at, s.others, s.own, s.instances)
		if r.Others != s.wantOthers || r.Own != s.wantOwn || r.Taught() != s.wantTaught || !r.Answered() {
			t.Fatalf("step %d: others %d own %d taught %v, want %d %d %v", i, r.Others, r.Own, r.Taught(), s.wantOthers, s.wantOwn, s.wantTaught)
		}
	}
	if r.LastAnswer() != t0+200*ms {
		t.Fatalf("last answer %d", r.LastAnswer())
	}
}

// TestObserve: the live rate is measured over windows of at least Span,
// each ending one sets Recheck, and a burst in progress counts in Fleet.
func TestObserve(t *testing.T) {
	ms := int64(time.Millisecond)
	r := Rates{Instances: 2}
	r.Observe(t0, 10)
	if !r.Recheck {
		t.Fatal("the first observation starts a live window: Recheck")
	}
	r.Recheck = false
	r.Observe(t0+5*ms, 10) // within the window
	if r.Recheck || r.live != 0 {
		t.Fatalf("within the window: recheck %v live %d", r.Recheck, r.live)
	}
	if got := r.Fleet(t0 + 5*ms); got != 2*20*1000/5 {
		t.Fatalf("burst in progress: fleet %d, want %d", got, 2*20*1000/5)
	}
	r.Observe(t0+20*ms, 1) // the window ends: 20 hits in 20 ms
	if !r.Recheck || r.live != 1000 {
		t.Fatalf("after the window: recheck %v live %d, want true 1000", r.Recheck, r.live)
	}
}
