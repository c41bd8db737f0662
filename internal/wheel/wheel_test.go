package wheel

import (
	"slices"
	"testing"
)

// TestTurn: a turn visits the references of its tick's place only — ticks
// a whole wheel apart share it —, keeps what it is told to and drops the
// rest; a wheel with no places turns over nothing.
func TestTurn(t *testing.T) {
	var w Wheel[int]
	w.Turn(3, func(int) bool { t.Fatal("an empty wheel visited something"); return false })
	w.Add(1, 3, 4)
	w.Add(2, 7, 4) // a turn later: the same place
	w.Add(3, 4, 4)
	w.Add(4, -1, 4) // a clock behind zero: place 3 as well
	if !w.Same(3, 7) || !w.Same(-1, 3) || w.Same(3, 4) {
		t.Fatal("Same disagrees with the places")
	}
	var seen []int
	w.Turn(3, func(v int) bool { seen = append(seen, v); return v == 2 }) // 2 waits for its turn
	if want := []int{1, 2, 4}; !slices.Equal(seen, want) {
		t.Fatalf("turn 3 visited %v, want %v", seen, want)
	}
	seen = nil
	w.Turn(7, func(v int) bool { seen = append(seen, v); return false })
	if want := []int{2}; !slices.Equal(seen, want) {
		t.Fatalf("turn 7 visited %v, want %v", seen, want)
	}
	seen = nil
	w.Turn(8, func(v int) bool { seen = append(seen, v); return false })
	if want := []int{3}; !slices.Equal(seen, want) {
		t.Fatalf("turn 8 visited %v, want %v", seen, want)
	}
	w.Turn(3, func(v int) bool { t.Fatalf("%d left, yet visited again", v); return false })
}
