package deferred

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const boundedRules = `
domain: shop
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 1}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://orders.test:8080/base/", max_queued: 3}
`

// deferOne decides one request for user (with request id id, if any)
// and queues it when deferred with payload p.
func (r *rig) deferOne(t *testing.T, q *Queue, user, id string, p *Payload) (ratelimit.Code, Receipt, error) {
	t.Helper()
	req := ratelimit.Request{Domain: "shop", Hits: 1, RequestID: id,
		Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "user_id", Value: user}}}}}
	var d ratelimit.Decision
	if err := r.engine.Check(context.Background(), &req, &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != ratelimit.Deferred {
		return d.Code, Receipt{}, nil
	}
	rc, err := q.Enqueue(context.Background(), &req, &d, p)
	return d.Code, rc, err
}

// counterKey is user's counter key under the rig's deferring rule: the
// key its items are counted under.
func (r *rig) counterKey(user string) string {
	es := []config.Entry{{Key: "user_id", Value: user}}
	return string(config.AppendCounterKey(nil, r.rules.Load().Match("shop", es), es))
}

// TestEnqueueOncePerRequestID: issue 19, item 5. The same request id
// three times made three tickets and three deliveries. A retry — through
// this queue or another checker's over the same store — answers the first
// ticket and queues nothing; another request under the id is a conflict;
// a retry while the first is still being queued is told to retry; an id
// whose item did not get onto the topic is free again.
func TestEnqueueOncePerRequestID(t *testing.T) {
	r := newRig(t, "10m", 5)
	other := NewQueue(r.topic, r.tickets, nil, time.Hour) // a second checker's queue
	for range 10 {
		r.check(t, "alice", nil)
	}
	pay := &Payload{Path: "/orders/7", Body: "pay"}
	_, first, err := r.deferOne(t, r.queue, "alice", "order-7", pay)
	if err != nil || !ValidTicket(first.Ticket) || first.Repeat {
		t.Fatalf("first: %+v %v", first, err)
	}
	for i, q := range []*Queue{r.queue, other} {
		_, rc, err := r.deferOne(t, q, "alice", "order-7", &Payload{Path: "/orders/7", Body: "pay"})
		if err != nil || rc.Ticket != first.Ticket || !rc.Repeat || !rc.Deadline.Equal(first.Deadline) {
			t.Fatalf("retry %d: %+v %v, want ticket %s again", i, rc, err, first.Ticket)
		}
	}
	if n := r.topic.Pending(); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
	if r.queue.Repeats.Load()+other.Repeats.Load() != 2 || r.queue.Enqueued.Load() != 1 {
		t.Fatalf("repeats %d+%d, enqueued %d", r.queue.Repeats.Load(), other.Repeats.Load(), r.queue.Enqueued.Load())
	}
	conflicts := []struct {
		name, user string
		p          *Payload
	}{
		{"another user", "bob", pay},
		{"another payload", "alice", &Payload{Path: "/orders/8", Body: "pay"}},
		{"no payload", "alice", nil},
	}
	for _, c := range conflicts {
		for n := 0; ; n++ { // over the limit
			if code, _ := r.check(t, c.user, nil); code != ratelimit.OK {
				break
			}
		}
		_, rc, err := r.deferOne(t, other, c.user, "order-7", c.p)
		var fe *ratelimit.FieldError
		if !errors.As(err, &fe) || fe.Field != "request_id" || !errors.Is(err, ratelimit.ErrRequestIDConflict) || rc.Ticket != "" {
			t.Fatalf("%s under the id: %+v %v, want a request_id conflict", c.name, rc, err)
		}
	}

	// a retry while the first is on its way to the topic
	slow := &gate{release: make(chan struct{}), entered: make(chan struct{})}
	sq := NewQueue(slow, r.tickets, nil, time.Hour)
	var wg sync.WaitGroup
	var firstRC Receipt
	var firstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, firstRC, firstErr = r.deferOne(t, sq, "alice", "order-9", nil)
	}()
	<-slow.entered
	if _, _, err := r.deferOne(t, other, "alice", "order-9", nil); !errors.Is(err, ErrRequestInFlight) {
		t.Fatalf("a retry while the first is being queued: %v, want ErrRequestInFlight", err)
	}
	close(slow.release)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if _, rc, err := r.deferOne(t, other, "alice", "order-9", nil); err != nil || rc.Ticket != firstRC.Ticket {
		t.Fatalf("after it was queued: %+v %v, want %s", rc, err, firstRC.Ticket)
	}

	// not queued: the id is free again, and the retry is queued
	broken := NewQueue(failing{}, r.tickets, nil, time.Hour)
	if _, _, err := r.deferOne(t, broken, "alice", "order-10", nil); err == nil {
		t.Fatal("queued on a broken topic")
	}
	if _, rc, err := r.deferOne(t, r.queue, "alice", "order-10", nil); err != nil || rc.Repeat || !ValidTicket(rc.Ticket) {
		t.Fatalf("the retry after a failed enqueue: %+v %v, want it queued anew", rc, err)
	}
}

// gate is a topic whose Publish waits for release.
type gate struct {
	release, entered chan struct{}
	once             sync.Once
}

func (g *gate) Publish(ctx context.Context, _ []events.Message) error {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (g *gate) Close(context.Context) error { return nil }

// TestEnqueueBounds: issue 19, item 7. Past defer.max_queued for a key,
// and past deferred.max_bytes in all, a request is refused with a
// *FullError naming the bound, counted, and nothing is written; the
// drain's finishing an item (delivered, or dead-lettered) makes its room
// again, and what the store counts returns to nothing.
func TestEnqueueBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigRules(t, boundedRules)
		key := r.counterKey("alice")
		r.check(t, "alice", nil)
		for i := range 3 {
			if _, rc, err := r.deferOne(t, r.queue, "alice", "", &Payload{Body: "x"}); err != nil || rc.Ticket == "" {
				t.Fatalf("item %d: %+v %v", i, rc, err)
			}
		}
		_, _, err := r.deferOne(t, r.queue, "alice", "", &Payload{Body: "x"})
		var fe *FullError
		if !errors.As(err, &fe) || !errors.Is(err, ErrQueueFull) || fe.Bound != BoundMaxQueued || fe.Limit != 3 || fe.Queued != 3 {
			t.Fatalf("the 4th: %v, want a FullError of max_queued 3", err)
		}
		if r.queue.FullKey.Load() != 1 || r.topic.Pending() != 3 {
			t.Fatalf("full %d, records %d", r.queue.FullKey.Load(), r.topic.Pending())
		}
		if n, b := r.tickets.QueuedItems(key); n != 3 || b == 0 {
			t.Fatalf("the store counts %d items, %d bytes", n, b)
		}
		// the bytes in all: another key, a queue allowing only what is
		// queued now plus one small item
		_, before := r.tickets.QueuedItems(key)
		small := NewQueue(r.topic, r.tickets, nil, time.Hour)
		r.check(t, "bob", nil)
		if _, _, err := r.deferOne(t, small, "bob", "", &Payload{Body: "y"}); err != nil {
			t.Fatalf("bob's first: %v", err)
		}
		_, after := r.tickets.QueuedItems(key)
		// room for all but one byte of another item like it
		small.WithMaxBytes(after + (after - before) - 1)
		_, _, err = r.deferOne(t, small, "bob", "", &Payload{Body: "y"})
		if !errors.As(err, &fe) || fe.Bound != BoundMaxBytes || fe.Limit != small.maxBytes || fe.Queued != after || small.FullBytes.Load() != 1 {
			t.Fatalf("over max_bytes: %v, want a FullError of max_bytes", err)
		}
		small.WithMaxBytes(after + (after - before))
		if _, _, err := r.deferOne(t, small, "bob", "", &Payload{Body: "y"}); err != nil {
			t.Fatalf("exactly at max_bytes: %v", err)
		}
		// the drain delivers one a second (the limit); every finished item
		// leaves the count
		d := r.drain(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = d.Run(ctx) }()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		cancel()
		if n := len(r.target.list()); n != 5 {
			t.Fatalf("%d deliveries, want 5", n)
		}
		if n, b := r.tickets.QueuedItems(key); n != 0 || b != 0 {
			t.Fatalf("after the drain the store counts %d items, %d bytes, want none", n, b)
		}
	})
}

// TestDeadLettersLeaveTheCount: an item dead-lettered (expired) leaves
// the count too.
func TestDeadLettersLeaveTheCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "1s", 5)
		for range 10 {
			r.check(t, "alice", nil)
		}
		r.check(t, "alice", nil)
		time.Sleep(2 * time.Second)
		d := r.drain(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = d.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		cancel()
		if d.DeadLetters()[ReasonExpired] != 1 {
			t.Fatalf("dead letters %v", d.DeadLetters())
		}
		if n, b := r.tickets.QueuedItems(r.counterKey("alice")); n != 0 || b != 0 {
			t.Fatalf("the store still counts %d items, %d bytes", n, b)
		}
	})
}
