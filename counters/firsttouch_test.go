package counters

import (
	"context"
	"testing"
	"time"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// TestChargeReservesTheOthersAllowances: a charge holds back, for each
// other live instance not marked in the window, its first-touch allowance
// less the memory hits the window holds of it; a charge that marks its
// instance ends the reservation for it; one that does not mark (an entry
// that may not hold all its instance's hits) keeps it. Every store alike.
func TestChargeReservesTheOthersAllowances(t *testing.T) {
	ctx := context.Background()
	W := int64(time.Minute)
	ws := (time.Now().UnixNano() / W) * W
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := "api:ft|k=" + name
			charge := func(inst string, cost, emitted int64, mark bool, others ...string) ChargeResult {
				t.Helper()
				q := &ChargeRequest{Key: key, Kind: KindWindow, Instance: inst, Now: ws + 1, Cost: cost, Window: ws, WindowNanos: W,
					Ceiling: 10, OwnEmitted: emitted, Allowance: 4, Others: others, Mark: mark}
				res, err := s.Charge(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			type step struct {
				name         string
				res          ChargeResult
				allowed      bool
				total, resvd int64
			}
			steps := []step{
				{"a: 6 with b's 4 reserved", charge("a", 6, 0, true, "b"), true, 6, 4},
				{"a: 1 more would take b's", charge("a", 1, 0, true, "b"), false, 6, 4},
			}
			// b's two memory hits reach the store: 2 of its allowance remain
			s.apply(ctx, []Delivered{{Partition: 0, Delta: &eventsv1.Delta{InstanceId: "b", Sequence: 1, CounterKey: key,
				Algorithm: "fixed_window", WindowStartUnixNanos: ws, WindowNanos: W, Limit: 10, AllowedCount: 2, AllowedCost: 2,
				CountedCost: 2}}})
			steps = append(steps, []step{
				{"a: 1 more would take b's 2 left", charge("a", 1, 0, true, "b"), false, 8, 2},
				{"b charges without marking", charge("b", 0, 2, false, "a"), true, 8, 0},
				{"a: b's 2 still reserved", charge("a", 0, 0, true, "b"), true, 8, 2},
			}...)
			for _, st := range steps {
				if st.res.Allowed != st.allowed || st.res.Total != st.total || st.res.Reserved != st.resvd {
					t.Fatalf("%s: allowed %v total %d reserved %d; want %v %d %d", st.name, st.res.Allowed, st.res.Total,
						st.res.Reserved, st.allowed, st.total, st.resvd)
				}
			}
			// b marks: nothing of it is reserved any more
			if res := charge("b", 0, 2, true, "a"); res.Reserved != 0 {
				t.Fatalf("b marking: reserved %d for a, which marked", res.Reserved)
			}
			if res := charge("a", 2, 0, true, "b"); !res.Allowed || res.Reserved != 0 || res.Total != 10 {
				t.Fatalf("after b marked: allowed %v total %d reserved %d; want true, 10 and 0", res.Allowed, res.Total, res.Reserved)
			}
		})
	}
}
