package deferred

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// benchDecision is one deferred decision of the shop rules, reused.
func benchDecision(b *testing.B) (*rig, ratelimit.Request, ratelimit.Decision) {
	b.Helper()
	r := newRig(b, "10m", 5)
	for {
		req := ratelimit.Request{Domain: "shop", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "user_id", Value: "alice"}}}}}
		var d ratelimit.Decision
		if err := r.engine.Check(context.Background(), &req, &d); err != nil {
			b.Fatal(err)
		}
		if d.Code == ratelimit.Deferred {
			return r, req, d
		}
	}
}

// BenchmarkEnqueue is the cost of queueing one deferred request with a
// small payload on the in-memory bus and store (the Kafka and Redis round
// trips are not in it), and of the drain's taking it out of the count of
// queued items (else the key's defer.max_queued refuses the rest);
// BenchmarkEnqueueReference is the bus append alone, the ratio's
// reference in the same run.
func BenchmarkEnqueue(b *testing.B) {
	r, req, d := benchDecision(b)
	bus, _ := events.NewMemBus(4, 1<<30)
	ms := counters.NewMemStore()
	q := NewQueue(bus, ms, nil, time.Hour)
	_ = r
	p := &Payload{Method: "POST", Path: "/orders", Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"sku":"a1","n":2}`}
	key := string(config.AppendCounterKey(nil, d.Statuses[0].Rule, req.Descriptors[0].Entries)) // the item's key
	b.ReportAllocs()
	for b.Loop() {
		rc, err := q.Enqueue(context.Background(), &req, &d, p)
		if err != nil {
			b.Fatal(err)
		}
		_ = ms.FinishItem(context.Background(), key, rc.Ticket)
	}
}

func BenchmarkEnqueueReference(b *testing.B) {
	bus, _ := events.NewMemBus(4, 1<<30)
	v := []byte(`{"v":1,"ticket":"AAAAAAAAAAAAAAAAAAAAAA","domain":"shop","rule":"shop:user_id","key":"shop:user_id|user_id=alice","descriptors":[{"entries":[{"key":"user_id","value":"alice"}]}],"hits":1,"enqueued_at":"2026-12-01T00:00:00Z","deadline":"2026-12-01T00:10:00Z","payload":{"method":"POST","path":"/orders","headers":{"Content-Type":"application/json"},"body":"{\"sku\":\"a1\",\"n\":2}"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := bus.Publish(context.Background(), []events.Message{{Key: []byte("shop:user_id|user_id=alice"), Value: v}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is the drain's cost of reading one item.
func BenchmarkDecode(b *testing.B) {
	h := int64(1)
	v, _ := Encode(&Item{V: 1, Ticket: NewTicket(), Domain: "shop", Rule: "shop:user_id", Key: "shop:user_id|user_id=a",
		Descriptors: []Descriptor{{Entries: []Entry{{Key: "user_id", Value: "a"}}, Hits: &h}}, Hits: 1,
		EnqueuedAt: time.Unix(1, 0).UTC(), Deadline: time.Unix(601, 0).UTC(),
		Payload: &Payload{Method: "POST", Path: "/o", Headers: map[string]string{"A": "b"}, Body: `{"sku":"a1"}`}})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(v); err != nil {
			b.Fatal(err)
		}
	}
}
