package tombs

import (
	"math/rand/v2"
	"testing"
)

func TestTable(t *testing.T) {
	var none Table
	if none.Until(1) != 0 {
		t.Fatal("a nil table knows something")
	}
	none.Forget(1) // must not panic
	cases := []struct {
		keys, slots int
	}{{0, 64}, {64, 64}, {65, 128}, {1000, 1024}}
	for _, c := range cases {
		if got := len(New(c.keys)); got != c.slots {
			t.Errorf("New(%d): %d slots, want %d", c.keys, got, c.slots)
		}
	}
	tb := New(1024)
	tb.Mark(42, 100)
	tb.Mark(42, 50) // an earlier end never shortens a later one
	if got := tb.Until(42); got != 100 {
		t.Fatalf("Until after Mark: %d, want 100", got)
	}
	tb.Forget(42)
	if got := tb.Until(42); got != 0 {
		t.Fatalf("Until after Forget: %d, want 0", got)
	}
}

// A key never reads an end earlier than its own mark, however full the
// table: no key evicted while over comes back fresh.
func TestNoMarkedKeyComesBackFresh(t *testing.T) {
	tb := New(256)
	marks := map[uint64]int64{}
	for range 2000 {
		h, until := rand.Uint64(), rand.Int64N(1e9)+1
		tb.Mark(h, until)
		marks[h] = max(marks[h], until)
	}
	for h, until := range marks {
		if got := tb.Until(h); got < until {
			t.Fatalf("key %x marked until %d reads %d", h, until, got)
		}
	}
}
