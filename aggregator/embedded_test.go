package aggregator

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

const w0 = int64(1_700_006_400) * 1e9

func delta(seq uint64, cost uint64) *eventsv1.Delta {
	return &eventsv1.Delta{InstanceId: "c/1", Sequence: seq, Domain: "api", RuleId: "api:user_id",
		CounterKey: "api:user_id|user_id=a", Algorithm: "fixed_window", WindowStartUnixNanos: w0,
		WindowNanos: 60e9, Limit: 100, AllowedCount: 1, AllowedCost: cost, CountedCost: cost,
		FirstUnixNanos: w0 + 1, LastUnixNanos: w0 + 1}
}

// TestEmbeddedAppliesOnceAcrossRedelivery: a consumer that dies before
// committing gets its messages again; the store counts each delta once.
func TestEmbeddedAppliesOnceAcrossRedelivery(t *testing.T) {
	bus, _ := events.NewMemBus(2, 100)
	store := counters.NewMemStore()
	ctx := context.Background()
	bus.Produce(ctx, []*eventsv1.Delta{delta(1, 2), delta(2, 3), delta(2, 3)}) // a producer retry copy
	agg := NewEmbedded(bus, store, nil)
	agg.Start(ctx)
	waitFor(t, func() bool { return agg.Applied.Load()+agg.Duplicates.Load() == 3 })
	agg.Stop(ctx)
	bus.Rewind() // nothing uncommitted: no redelivery expected, but a re-read must not double count
	bus.Produce(ctx, []*eventsv1.Delta{delta(3, 4)})
	agg2 := NewEmbedded(bus, store, nil)
	agg2.Start(ctx)
	waitFor(t, func() bool { return agg2.Applied.Load() == 1 })
	agg2.Stop(ctx)
	items := []counters.ReadItem{{Key: "api:user_id|user_id=a", Kind: counters.KindWindow, Window: w0}}
	store.Read(ctx, "c/1", items)
	if items[0].Total != 9 || agg.Duplicates.Load() != 1 {
		t.Fatalf("total %d (want 9), duplicates %d (want 1)", items[0].Total, agg.Duplicates.Load())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond) // waiting on a goroutine, not letting time pass
	}
}
