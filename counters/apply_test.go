package counters

import (
	"context"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestApplyBatchAgreesWithMemory: batches of random deltas — windows and
// buckets, several instances and partitions, own_after folds, copies of
// deltas applied before (a producer retry, a re-read after a crash),
// more counters than one script call takes and hot counters with more
// deltas than one call's arguments — leave Redis (standalone and
// cluster) where the memory store is, and skip exactly the copies.
func TestApplyBatchAgreesWithMemory(t *testing.T) {
	for name, s := range stores(t) {
		if name == "memory" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			iteration := 0
			rapid.Check(t, func(rt *rapid.T) {
				mem := memStore{NewMemStore()}
				iteration++ // counters of their own: an earlier iteration's watermarks stay
				run := fmt.Sprint(iteration)
				nkeys := rapid.SampledFrom([]int{1, 3, 150, 260}).Draw(rt, "keys")
				type stream struct {
					inst string
					part int
					seq  uint64
				}
				streams := []*stream{{"a/1", 0, 0}, {"a/1", 1, 0}, {"b/1", 0, 0}, {"c/1", 3, 0}}
				own := map[string]uint64{} // instance|key → its cumulative hits, for own_after
				var sent []Delivered
				for b := range rapid.IntRange(1, 4).Draw(rt, "batches") {
					var batch []Delivered
					for range rapid.IntRange(1, 1500).Draw(rt, "deltas") {
						if len(sent) > 0 && rapid.IntRange(0, 9).Draw(rt, "copy") == 0 {
							batch = append(batch, sent[rapid.IntRange(0, len(sent)-1).Draw(rt, "which")])
							continue
						}
						st := streams[rapid.IntRange(0, len(streams)-1).Draw(rt, "stream")]
						st.seq++
						k := rapid.IntRange(0, nkeys-1).Draw(rt, "key")
						if rapid.IntRange(0, 3).Draw(rt, "hot") == 0 {
							k = 0
						}
						key := fmt.Sprintf("api:k|k=%s-%d", run, k)
						counted := uint64(rapid.IntRange(1, 5).Draw(rt, "counted"))
						d := winDelta(st.inst, st.seq, key, counted, 0)
						if k%2 == 1 {
							d.Algorithm, d.WindowStartUnixNanos, d.WindowNanos, d.RateTokens = "token_bucket", 0, 1e9, 100
							d.FirstUnixNanos = w0 + int64(st.seq)*1e6
						}
						o := st.inst + "|" + key
						own[o] += counted
						if rapid.Bool().Draw(rt, "folded") {
							// a charge folded this instance's hits up to here
							d.OwnAfter = own[o]
						}
						x := Delivered{Partition: st.part, Delta: d}
						batch = append(batch, x)
						sent = append(sent, x)
					}
					ma, ms := mem.apply(context.Background(), batch)
					ra, rs := s.apply(context.Background(), batch)
					if ra != ma || rs != ms {
						rt.Fatalf("batch %d of %d deltas: applied %d skipped %d, memory %d and %d", b, len(batch), ra, rs, ma, ms)
					}
				}
				for k := range nkeys {
					key := fmt.Sprintf("api:k|k=%s-%d", run, k)
					kind := KindWindow
					if k%2 == 1 {
						kind = KindTAT
					}
					for _, inst := range []string{"a/1", "b/1", "c/1"} {
						got, want := read(t, s, inst, key, kind), read(t, mem, inst, key, kind)
						if got.Own != want.Own || got.Cum != want.Cum || got.Instances != want.Instances ||
							(kind == KindWindow && got.Total != want.Total) ||
							(kind == KindTAT && (got.Total-want.Total > 1000 || want.Total-got.Total > 1000)) {
							rt.Fatalf("%s as %s: redis %+v, memory %+v", key, inst, got, want)
						}
					}
				}
			})
		})
	}
}

// TestApplyCallsPack: counters of one slot share a call up to its
// bounds; a counter larger than a call has one of its own; a change of
// slot starts a call.
func TestApplyCallsPack(t *testing.T) {
	group := func(slot string, deltas int) *applyGroup {
		return &applyGroup{key: slot + "k", slot: slot, args: make([]any, 3+7*deltas)}
	}
	many := make([]*applyGroup, 250)
	for i := range many {
		many[i] = group("", 1)
	}
	cases := []struct {
		name   string
		groups []*applyGroup
		want   []int // counters per call
	}{
		{"one", []*applyGroup{group("", 1)}, []int{1}},
		{"many counters", many, []int{100, 100, 50}},
		{"a hot counter", []*applyGroup{group("", 1), group("", 700), group("", 1)}, []int{1, 1, 1}},
		{"slots", []*applyGroup{group("x", 1), group("x", 1), group("y", 1), group("x", 1)}, []int{2, 1, 1}},
	}
	for _, c := range cases {
		calls := applyCalls(c.groups, 7)
		var got []int
		for _, call := range calls {
			got = append(got, len(call.keys))
			if call.args[0] != int64(7) {
				t.Fatalf("%s: a call's first argument %v, want now", c.name, call.args[0])
			}
			if len(call.args) > applyArgsMax && len(call.keys) > 1 {
				t.Fatalf("%s: a call of %d counters carries %d arguments", c.name, len(call.keys), len(call.args))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: counters per call %v, want %v", c.name, got, c.want)
		}
	}
}
