package counters

import (
	"context"
	"testing"
)

// TestChargeWindowEdges: a window charge admits up to its ceiling and not
// one hit more, counting what the other shards of a hot key hold, and a
// sliding window's previous window weighs exactly (W − elapsed) / W: at
// the nanosecond the weight allows a hit it is admitted, one ns before it
// is not. On every store.
func TestChargeWindowEdges(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			steps := []struct {
				what          string
				key           string
				window, at    int64 // the window's start, and now, as offsets from w0
				cost          int64
				sliding       bool
				shards, prevS int64 // the other shards' totals (this and the previous window)
				allowed       bool
			}{
				{"fixed: other shards hold 5 of 10", "f", 0, 5e9, 6, false, 5, 0, false},
				{"fixed: 5 fit", "f", 0, 5e9, 5, false, 5, 0, true},
				{"sliding: 20 in the previous window", "s", -60e9, -30e9, 20, true, 0, 0, true},
				{"sliding: 39 late in this one", "s", 0, 50e9, 39, true, 0, 0, true},
				// 20·(60 − e)/60 + 40 <= 50 from e = 30 s on
				{"sliding: one ns early", "s", 0, 30e9 - 1, 1, true, 0, 0, false},
				{"sliding: at the ns", "s", 0, 30e9, 1, true, 0, 0, true},
				{"sliding: then full", "s", 0, 30e9, 1, true, 0, 0, false},
				// other shards: (20 + 10)·30/60 + 5 + cost <= 50
				{"sliding shards: seed", "h", -60e9, -30e9, 20, true, 0, 0, true},
				{"sliding shards: one over", "h", 0, 30e9, 31, true, 5, 10, false},
				{"sliding shards: fits", "h", 0, 30e9, 30, true, 5, 10, true},
			}
			for i, st := range steps {
				q := &ChargeRequest{Key: "api:e|e=" + st.key, Kind: KindWindow, Instance: "a/1", Now: w0 + st.at, Cost: st.cost,
					Window: w0 + st.window, WindowNanos: 60e9, Ceiling: 50, Sliding: st.sliding,
					OtherShards: st.shards, PrevOtherShards: st.prevS}
				if !st.sliding {
					q.Ceiling = 10
				}
				res, err := s.Charge(ctx, q)
				if err != nil || res.Allowed != st.allowed {
					t.Fatalf("step %d (%s): %+v %v, want allowed %v", i, st.what, res, err, st.allowed)
				}
			}
		})
	}
}

// TestSpan: the time n hits take is rounded up to the nanosecond (a TAT
// never moves by less than the hits cost) and saturates.
func TestSpan(t *testing.T) {
	cases := []struct{ n, period, tokens, want int64 }{
		{0, 1e9, 3, 0},
		{-1, 1e9, 3, 0},
		{1, 1e9, 3, 333_333_334},
		{2, 1e9, 3, 666_666_667},
		{3, 1e9, 3, 1e9},
		{1, 1e9, 1e9, 1},
		{1 << 62, 1 << 62, 1, 1 << 62},
	}
	for i, c := range cases {
		if got := Span(c.n, c.period, c.tokens); got != c.want {
			t.Fatalf("case %d: Span(%d, %d, %d) = %d, want %d", i, c.n, c.period, c.tokens, got, c.want)
		}
	}
}
