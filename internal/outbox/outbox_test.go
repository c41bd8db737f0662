package outbox

import (
	"context"
	"errors"
	"slices"
	"testing"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// flaky refuses its calls while down, and records what it accepted.
type flaky struct {
	down  bool
	calls int
	got   []uint64 // sequences accepted, in order
	sizes []int
}

func (f *flaky) Produce(_ context.Context, ds []*eventsv1.Delta) error {
	f.calls++
	if f.down {
		return errors.New("broker down")
	}
	f.sizes = append(f.sizes, len(ds))
	for _, d := range ds {
		f.got = append(f.got, d.Sequence)
	}
	return nil
}

func (f *flaky) Close(context.Context) error { return nil }

func deltas(n int) []*eventsv1.Delta {
	ds := make([]*eventsv1.Delta, n)
	for i := range ds {
		ds[i] = &eventsv1.Delta{FirstUnixNanos: 1}
	}
	return ds
}

// TestOrderSurvivesRefusals: deltas refused go ahead of later ones, every
// delta is numbered once in the order made, and batches stay within the
// bound.
func TestOrderSurvivesRefusals(t *testing.T) {
	p := &flaky{}
	o := New(p, 5, 2)
	now := func() int64 { return 10 }
	ctx := context.Background()
	if err := o.Send(ctx, deltas(3), now); err != nil { // 1 2 3
		t.Fatal(err)
	}
	p.down = true
	if err := o.Send(ctx, deltas(2), now); err == nil { // 4 5, held
		t.Fatal("a refused send reported no error")
	}
	if o.Held() != 2 || o.Full() {
		t.Fatalf("held %d (full %v), want 2 and not full", o.Held(), o.Full())
	}
	if err := o.Send(ctx, deltas(3), now); err == nil { // 6 7 8, held behind 4 5
		t.Fatal("a refused send reported no error")
	}
	if !o.Full() {
		t.Fatalf("held %d: want full at 5", o.Held())
	}
	p.down = false
	if err := o.Send(ctx, nil, now); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(p.got, want) {
		t.Fatalf("sequences %v, want %v", p.got, want)
	}
	for _, n := range p.sizes {
		if n > 2 {
			t.Fatalf("a batch of %d, bound 2", n)
		}
	}
	if o.Held() != 0 || o.Emitted.Load() != 8 || o.Errors.Load() != 2 {
		t.Fatalf("held %d, emitted %d, errors %d: want 0, 8, 2", o.Held(), o.Emitted.Load(), o.Errors.Load())
	}
	if o.Latency.Snapshot().Count != 8 {
		t.Fatalf("latency observed %d times, want 8", o.Latency.Snapshot().Count)
	}
}
