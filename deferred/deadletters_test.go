package deferred

import (
	"context"
	"fmt"
	"testing"

	"github.com/velvetrope/velvetrope/events"
)

// TestMemDeadLettersBounded: the newest records within the bound are
// kept, the oldest let go and counted; a record larger than the bound is
// kept alone; nothing is ever refused.
func TestMemDeadLettersBounded(t *testing.T) {
	ctx := context.Background()
	m := NewMemDeadLetters(1000)
	for i := range 50 {
		if err := m.Publish(ctx, []events.Message{{Key: []byte("k"), Value: []byte(fmt.Sprintf("%099d", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	held := m.Held()
	if len(held) != 10 || string(held[9].Value) != fmt.Sprintf("%099d", 49) || string(held[0].Value) != fmt.Sprintf("%099d", 40) {
		t.Fatalf("held %d records, want the newest 10", len(held))
	}
	if m.Dropped.Load() != 40 {
		t.Fatalf("dropped %d, want 40", m.Dropped.Load())
	}
	if err := m.Publish(ctx, []events.Message{{Value: make([]byte, 5000)}}); err != nil {
		t.Fatal(err)
	}
	if held := m.Held(); len(held) != 1 || len(held[0].Value) != 5000 {
		t.Fatalf("a record over the bound: held %d", len(held))
	}
}
