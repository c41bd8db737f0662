package counters

import (
	"context"
	"testing"
	"time"
)

// TestTicketsMerge: on every store a ticket's state moves queued →
// terminal and never back; attempts only grow; the first enqueue and
// delivery times stay; an unknown ticket is not found.
func TestTicketsMerge(t *testing.T) {
	for name, s := range stores(t) {
		tk, ok := s.(Tickets)
		if !ok {
			t.Fatalf("%s: store does not keep tickets", name)
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			id := "tk-" + name + "-" + time.Now().Format("150405.000000000")
			steps := []struct {
				put  Ticket
				want Ticket
			}{
				{Ticket{State: TicketQueued, EnqueuedAt: 100}, Ticket{State: TicketQueued, EnqueuedAt: 100}},
				{Ticket{State: TicketQueued, Attempts: 2, Reason: "target answered 503"},
					Ticket{State: TicketQueued, Attempts: 2, EnqueuedAt: 100, Reason: "target answered 503"}},
				{Ticket{State: TicketQueued, Attempts: 1, EnqueuedAt: 999},
					Ticket{State: TicketQueued, Attempts: 2, EnqueuedAt: 100, Reason: "target answered 503"}},
				{Ticket{State: TicketDelivered, Attempts: 3, DeliveredAt: 500},
					Ticket{State: TicketDelivered, Attempts: 3, EnqueuedAt: 100, DeliveredAt: 500, Reason: "target answered 503"}},
				// a drain re-reading the item after a crash
				{Ticket{State: TicketQueued, EnqueuedAt: 100},
					Ticket{State: TicketDelivered, Attempts: 3, EnqueuedAt: 100, DeliveredAt: 500, Reason: "target answered 503"}},
				{Ticket{State: TicketFailed, Reason: "late"},
					Ticket{State: TicketDelivered, Attempts: 3, EnqueuedAt: 100, DeliveredAt: 500, Reason: "target answered 503"}},
			}
			for i, st := range steps {
				if err := tk.PutTicket(ctx, id, st.put, time.Minute); err != nil {
					t.Fatalf("step %d: put: %v", i, err)
				}
				got, found, err := tk.GetTicket(ctx, id)
				if err != nil || !found || got != st.want {
					t.Fatalf("step %d: got %+v %v %v, want %+v", i, got, found, err, st.want)
				}
			}
			if _, found, err := tk.GetTicket(ctx, id+"-other"); found || err != nil {
				t.Fatalf("unknown ticket: found %v, %v", found, err)
			}
			if err := tk.PutTicket(ctx, "", Ticket{State: TicketQueued}, time.Minute); err == nil {
				t.Fatal("a ticket without an id was stored")
			}
		})
	}
}

// TestMemTicketsExpire: a ticket is gone once its ttl passes on the
// store's clock.
func TestMemTicketsExpire(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{ns: w0}
	ms := NewMemStore()
	ms.SetClock(clk)
	if err := ms.PutTicket(ctx, "a", Ticket{State: TicketQueued}, time.Second); err != nil {
		t.Fatal(err)
	}
	clk.ns += int64(999 * time.Millisecond)
	if _, found, _ := ms.GetTicket(ctx, "a"); !found {
		t.Fatal("gone before its ttl")
	}
	clk.ns += int64(time.Millisecond)
	if _, found, _ := ms.GetTicket(ctx, "a"); found {
		t.Fatal("still there after its ttl")
	}
	// a write after expiry starts afresh: the old terminal state is gone
	if err := ms.PutTicket(ctx, "a", Ticket{State: TicketQueued, Attempts: 0}, time.Second); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := ms.GetTicket(ctx, "a"); got.State != TicketQueued {
		t.Fatalf("after expiry: %+v", got)
	}
}
