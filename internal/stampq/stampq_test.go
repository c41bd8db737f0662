package stampq

import (
	"slices"
	"testing"
)

type item struct {
	id   int
	used int64 // its last use: a reference stamped otherwise is stale
	gone bool
	busy bool // take refuses it
}

func current(it *item, at int64) bool { return !it.gone && it.used == at }

func TestDrain(t *testing.T) {
	items := make([]*item, 10)
	var q Queue[*item]
	for i := range items {
		items[i] = &item{id: i, used: int64(i)}
		q.Push(items[i], int64(i))
	}
	items[2].used = 100 // used again: stale
	q.Staled()
	items[3].gone = true // removed: stale
	q.Staled()
	items[4].busy = true // cannot leave yet
	var taken []int
	take := func(it *item) bool {
		if it.busy {
			return false
		}
		taken = append(taken, it.id)
		return true
	}
	q.Drain(6, current, take) // stamps 0..5
	if want := []int{0, 1, 5}; !slices.Equal(taken, want) {
		t.Fatalf("taken %v, want %v", taken, want)
	}
	if q.Len() != 5 { // 6..9, and 4 queued again
		t.Fatalf("len %d, want 5", q.Len())
	}
	items[4].busy = false
	taken = nil
	q.Drain(100, current, take)
	if want := []int{6, 7, 8, 9, 4}; !slices.Equal(taken, want) {
		t.Fatalf("taken %v, want %v", taken, want)
	}
	if q.Len() != 0 {
		t.Fatalf("len %d after draining all", q.Len())
	}
}

// Stale references are dropped before their turn once they are most of
// the queue: a removed item does not stay reachable.
func TestStaleReferencesAreDroppedEarly(t *testing.T) {
	var q Queue[*item]
	items := make([]*item, 1000)
	for i := range items {
		items[i] = &item{id: i, used: int64(1000 + i)}
		q.Push(items[i], items[i].used)
	}
	for _, it := range items[:900] {
		it.gone = true
		q.Staled()
	}
	q.Drain(0, current, func(*item) bool { t.Fatal("nothing is due"); return true })
	if q.Len() != 100 {
		t.Fatalf("len %d after compaction, want the 100 current", q.Len())
	}
	for _, r := range q.refs[q.head:] {
		if r.v.gone {
			t.Fatalf("item %d removed but still queued", r.v.id)
		}
	}
}

// Taken places at the head are given back once they are most of the
// slice.
func TestHeadIsReclaimed(t *testing.T) {
	var q Queue[*item]
	for i := range 200 {
		q.Push(&item{id: i, used: int64(i)}, int64(i))
	}
	q.Drain(150, current, func(*item) bool { return true })
	if q.head != 0 || len(q.refs) != 50 {
		t.Fatalf("head %d, %d places: want 0 and 50", q.head, len(q.refs))
	}
}
