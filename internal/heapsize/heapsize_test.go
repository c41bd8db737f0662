package heapsize

import "testing"

func TestOf(t *testing.T) {
	for i, c := range []struct{ n, want int64 }{{0, 0}, {1, 8}, {8, 8}, {9, 16}, {1025, 1152}, {8224, 9472}, {32768, 32768}, {32769, 40960}} {
		if got := Of(int(c.n)); got != c.want {
			t.Fatalf("step %d: Of(%d) = %d, want %d", i, c.n, got, c.want)
		}
	}
}
