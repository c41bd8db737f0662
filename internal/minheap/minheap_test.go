package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type item struct {
	key   int64
	place int32
}

func (it *item) HeapPlace() *int32 { return &it.place }
func (it *item) HeapKey() int64    { return it.key }

// TestAgainstSort: random sets, key changes and removals; the heap keeps
// every item's place right and pops in key order, as sorting the items
// left in it does.
func TestAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var h Heap[*item]
		var in []*item
		for range rng.IntN(200) {
			switch op := rng.IntN(4); {
			case op < 2 || len(in) == 0: // a new item
				it := &item{key: rng.Int64N(50), place: -1}
				h.Set(it)
				in = append(in, it)
			case op == 2: // a key changes
				it := in[rng.IntN(len(in))]
				it.key = rng.Int64N(50)
				h.Set(it)
			default: // one leaves
				j := rng.IntN(len(in))
				h.Remove(in[j])
				if in[j].place != -1 {
					t.Fatalf("round %d: a removed item keeps place %d", round, in[j].place)
				}
				in = slices.Delete(in, j, j+1)
			}
			for i, it := range h.items {
				if int(it.place) != i {
					t.Fatalf("round %d: item at %d says %d", round, i, it.place)
				}
			}
		}
		want := make([]int64, len(in))
		for i, it := range in {
			want[i] = it.key
		}
		slices.Sort(want)
		var got []int64
		for h.Len() > 0 {
			if m := h.Min(); m != h.items[0] {
				t.Fatal("Min is not the root")
			}
			got = append(got, h.Pop().key)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: popped %v, want %v", round, got, want)
		}
	}
}
