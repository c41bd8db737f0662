package checker

import (
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
	"testing"
	"time"
)

// bandOf decides hits for key on r and says which band decided it, by the
// band counters and the store's charges: far (memory only), near (one
// store charge) or over (refused from memory).
func bandOf(t *testing.T, r *rig, hits int64, kv ...string) (string, ratelimit.Decision) {
	t.Helper()
	before, charges := r.c.Snapshot(), r.store.charges.Load()
	d := r.check(t, hits, kv...)
	after, calls := r.c.Snapshot(), r.store.charges.Load()-charges
	switch {
	case after.FarBand == before.FarBand+1 && after.NearBand == before.NearBand && calls == 0:
		return "far", d
	case after.NearBand == before.NearBand+1 && after.FarBand == before.FarBand && calls == 1:
		return "near", d
	case after.OverBand == before.OverBand+1 && calls == 0:
		return "over", d
	}
	t.Fatalf("%d hits on %v: far %d→%d, near %d→%d, over %d→%d, %d store charges: no one band",
		hits, kv, before.FarBand, after.FarBand, before.NearBand, after.NearBand, before.OverBand, after.OverBand, calls)
	return "", d
}

// taught brings a new key of rule "huge" (1000 a minute) past what keeps
// a key near — two store answers, min_refresh + pipeline_lag of age —
// with 3 hits, slowly enough that its learned rate stays below the
// thresholds of the tests, and returns what remains.
func taught(t *testing.T, r *rig, value string) int64 {
	t.Helper()
	for _, at := range []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond} {
		r.clk.ns.Store(t0 + int64(at))
		if band, _ := bandOf(t, r, 1, "huge", value); band != "near" {
			t.Fatalf("a new key's decision at %v: %s, want near", at, band)
		}
	}
	r.clk.ns.Store(t0 + int64(time.Second))
	return 1000 - 3
}

// TestBandEdge pins where the near band starts, as docs/design.md states
// it: far while remaining − hits ≥ threshold, near below. A request that
// leaves exactly the threshold is decided from memory; one more hit goes
// to the store. The threshold here is the floor, absolute or a percentage
// of the limit (the learned rate is far below both).
func TestBandEdge(t *testing.T) {
	cases := []struct {
		name      string
		cfg       Config
		threshold int64
	}{
		{"near_floor", Config{CheckerConfig: config.CheckerConfig{NearFloor: 400}}, 400},
		{"near_floor_percent", Config{CheckerConfig: config.CheckerConfig{NearFloor: 1, NearFloorPct: 30}}, 300},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, c.cfg)
			// leaves exactly the threshold: far
			remaining := taught(t, r, "edge")
			if band, d := bandOf(t, r, remaining-c.threshold, "huge", "edge"); band != "far" || !d.Allowed() {
				t.Fatalf("%d hits of %d remaining (threshold %d): %s, allowed %v; want far", remaining-c.threshold, remaining, c.threshold, band, d.Allowed())
			}
			// then even one hit leaves less: near
			if band, _ := bandOf(t, r, 1, "huge", "edge"); band != "near" {
				t.Fatalf("1 hit at the threshold: %s, want near", band)
			}
			// on a key of its own, one hit more than the edge: near
			r = newRig(t, c.cfg)
			remaining = taught(t, r, "over-edge")
			if band, d := bandOf(t, r, remaining-c.threshold+1, "huge", "over-edge"); band != "near" || !d.Allowed() {
				t.Fatalf("%d hits of %d remaining (threshold %d): %s, allowed %v; want near", remaining-c.threshold+1, remaining, c.threshold, band, d.Allowed())
			}
		})
	}
}

// TestKeyStaysNearUntilTaught: a key is near until two store answers
// taught its rate, however old it is; then it may go far.
func TestKeyStaysNearUntilTaught(t *testing.T) {
	r := newRig(t, Config{})
	steps := []struct {
		at   time.Duration
		band string
	}{
		{0, "near"},           // new: the first answer
		{time.Second, "near"}, // old enough, but one answer only: the second
		{2 * time.Second, "far"},
	}
	for i, st := range steps {
		r.clk.ns.Store(t0 + int64(st.at))
		if band, _ := bandOf(t, r, 1, "huge", "taught"); band != st.band {
			t.Fatalf("step %d at %v: %s, want %s", i, st.at, band, st.band)
		}
	}
}
