package counters

import (
	"context"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// TestResetConformance: memory, Redis and the cluster forget a counter
// the same way: the total goes to zero, each instance's part becomes its
// base, a late delta adds exactly what it carries, charges after the
// reset count from zero, and a bucket's reset count moves.
func TestResetConformance(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		rst := s.(Resetter)
		t.Run(name+"/window", func(t *testing.T) {
			key := testsvc.Unique("api:k=") + "r"
			charge := func(inst string, cost, emitted int64) ChargeResult {
				res, err := s.Charge(ctx, &ChargeRequest{Key: key, Kind: KindWindow, Instance: inst,
					Now: w0 + 1e9, Cost: cost, Window: w0, WindowNanos: 60e9, Ceiling: 10, OwnEmitted: emitted})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			charge("a/1", 3, 0)
			s.apply(ctx, []Delivered{{0, winDelta("b/1", 1, key, 2, 2)}})
			late := winDelta("b/1", 2, key, 1, 3) // decided before the reset, applied after it
			if err := rst.Reset(ctx, []ResetItem{{Key: key, Kind: KindWindow, Window: w0}}); err != nil {
				t.Fatal(err)
			}
			if it := read(t, s, "a/1", key, KindWindow); it.Total != 0 || it.Own != 0 || it.Base != 3 || it.OwnSync != 3 {
				t.Fatalf("a after the reset: %+v", it)
			}
			if it := read(t, s, "b/1", key, KindWindow); it.Total != 0 || it.Own != 0 || it.Base != 2 || it.OwnMem != 2 {
				t.Fatalf("b after the reset: %+v", it)
			}
			s.apply(ctx, []Delivered{{0, late}})
			if it := read(t, s, "b/1", key, KindWindow); it.Total != 1 || it.Own != 1 {
				t.Fatalf("the late delta must add its one hit: %+v", it)
			}
			// a charges 9 more (emitted 0 in memory): 1 + 9 = 10 fits the ceiling.
			if res := charge("a/1", 9, 0); !res.Allowed || res.Total != 10 || res.Own != 9 || res.Base != 3 {
				t.Fatalf("charge after the reset: %+v", res)
			}
			if res := charge("a/1", 1, 0); res.Allowed {
				t.Fatalf("over the ceiling after the reset: %+v", res)
			}
		})
		t.Run(name+"/bucket", func(t *testing.T) {
			key := testsvc.Unique("api:b=") + "r"
			now := w0 + 5e9
			q := &ChargeRequest{Key: key, Kind: KindTAT, Instance: "a/1", Now: now, Cost: 5,
				WindowNanos: 1e9, Burst: 5, RateTokens: 10}
			if res, err := s.Charge(ctx, q); err != nil || !res.Allowed || res.Gen != 0 {
				t.Fatalf("first burst: %+v %v", res, err)
			}
			if res, _ := s.Charge(ctx, q); res.Allowed {
				t.Fatal("an empty bucket admitted")
			}
			if err := rst.Reset(ctx, []ResetItem{{Key: key, Kind: KindTAT}}); err != nil {
				t.Fatal(err)
			}
			if it := read(t, s, "a/1", key, KindTAT); it.Total != 0 || it.Gen != 1 || it.Own != 0 || it.Base != 5 {
				t.Fatalf("after the reset: %+v", it)
			}
			q.OwnCum = 0
			if res, err := s.Charge(ctx, q); err != nil || !res.Allowed || res.Gen != 1 || res.Own != 5 || res.Base != 5 {
				t.Fatalf("the whole burst again: %+v %v", res, err)
			}
		})
	}
}

// TestResetSync: a `mode: sync` counter forgets its windows, its TAT and
// its log.
func TestResetSync(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		ss, ok := s.(SyncStore)
		if !ok {
			continue
		}
		rst := s.(Resetter)
		for _, alg := range []string{"", "fixed_window", "sliding_window", "gcra", "sliding_log"} {
			t.Run(name+"/"+alg, func(t *testing.T) {
				q := SyncRequest{Key: testsvc.Unique("api:s="), Algorithm: config.Algorithm(alg), Limit: 2, Window: 60e9, Cost: 1}
				if alg == "gcra" {
					q.Tokens = 2
				}
				for i := range 3 {
					res, err := ss.ChargeSync(ctx, &q)
					if err != nil || res.Allowed != (i < 2) {
						t.Fatalf("charge %d: %+v %v", i, res, err)
					}
				}
				if err := rst.ResetSync(ctx, &q); err != nil {
					t.Fatal(err)
				}
				if res, err := ss.ChargeSync(ctx, &q); err != nil || !res.Allowed || res.Remaining != 1 {
					t.Fatalf("after the reset: %+v %v", res, err)
				}
			})
		}
	}
}
