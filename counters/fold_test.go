package counters

import (
	"context"
	"testing"
	"time"
)

// TestChargeFoldsUnapplied: a charge folds in the hits the caller decided
// in memory that the counter has not applied yet — only the part above
// what it already folded or applied, never all of it again — in the
// current window, the previous one (sliding) and a bucket's TAT, on every
// store. Each step is one charge of instance a, with the memory hits it
// reports and what the counter must then hold.
func TestChargeFoldsUnapplied(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name+"/window", func(t *testing.T) {
			steps := []struct {
				emitted, prevEmitted int64 // a's memory hits in this and the previous window
				total, own, prev     int64 // the counter after the charge of 1
			}{
				{3, 4, 4, 4, 4},    // fresh: the 3 and the previous window's 4 folded, and the charge
				{5, 6, 7, 7, 6},    // 2 more in memory (and 2 in the previous window): only they are added
				{5, 6, 8, 8, 6},    // nothing new: only the charge
				{4, 1, 9, 9, 6},    // less than folded (an entry created again): nothing taken back
				{10, 6, 15, 15, 6}, // 5 more
			}
			for i, st := range steps {
				q := &ChargeRequest{Key: "api:f|f=w", Kind: KindWindow, Instance: "a/1", Now: w0 + 40e9, Cost: 1,
					Window: w0, WindowNanos: 60e9, Ceiling: 100, OwnEmitted: st.emitted, Sliding: true, PrevEmitted: st.prevEmitted}
				res, err := s.Charge(ctx, q)
				if err != nil || !res.Allowed || res.Total != st.total || res.Own != st.own || res.PrevTotal != st.prev || res.PrevOwn != st.prev {
					t.Fatalf("step %d: %+v %v, want total %d own %d, previous window %d", i, res, err, st.total, st.own, st.prev)
				}
			}
		})
		t.Run(name+"/bucket", func(t *testing.T) {
			now := w0 + 1e9
			// 10 per second (100 ms a token), burst 20
			steps := []struct {
				cost, ownCum int64
				tat          time.Duration // after now
				cum, own     int64
			}{
				{5, 0, 500 * time.Millisecond, 5, 5},
				{1, 3, 900 * time.Millisecond, 9, 9}, // 3 decided in memory: the TAT moves by them too
				{1, 3, time.Second, 10, 10},          // nothing new
				{1, 2, 1100 * time.Millisecond, 11, 11},
				{1, 7, 1600 * time.Millisecond, 16, 16}, // 4 more
			}
			for i, st := range steps {
				q := &ChargeRequest{Key: "api:f|f=b", Kind: KindTAT, Instance: "a/1", Now: now, Cost: st.cost,
					WindowNanos: 1e9, Burst: 20, RateTokens: 10, OwnCum: st.ownCum}
				res, err := s.Charge(ctx, q)
				if err != nil || !res.Allowed || time.Duration(res.Total-now) != st.tat || res.Cum != st.cum || res.Own != st.own {
					t.Fatalf("step %d: %+v %v (TAT now + %v), want TAT now + %v, cum %d, own %d",
						i, res, err, time.Duration(res.Total-now), st.tat, st.cum, st.own)
				}
			}
		})
	}
}
