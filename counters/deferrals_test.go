package counters

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// deferrals returns each store of the conformance suite as Deferrals,
// twice: two handles on the same shared state, as two checkers have
// (for Redis, a second *Redis on the same client and prefix).
func deferrals(t *testing.T) map[string][2]Deferrals {
	t.Helper()
	out := map[string][2]Deferrals{}
	for name, s := range stores(t) {
		switch s := s.(type) {
		case memStore:
			out[name] = [2]Deferrals{s.MemStore, s.MemStore}
		case redisStore:
			out[name] = [2]Deferrals{s.Redis, NewRedis(s.Redis.c, s.Redis.prefix, 0)}
		default:
			t.Fatalf("%s: %T", name, s)
		}
	}
	return out
}

// TestRequestClaims: issue 19, item 5. The first claim of a (domain,
// request id) wins on every store and through either of two checkers;
// every later claim reads the winner's ticket, fingerprint, deadline and
// state; confirming marks it queued; only the winner's release frees the
// id. Domain and id are encoded injectively.
func TestRequestClaims(t *testing.T) {
	for name, ds := range deferrals(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, b := ds[0], ds[1]
			id := "order-" + time.Now().Format("150405.000000000")
			first := Claim{Ticket: "AAAAAAAAAAAAAAAAAAAAAA", Fingerprint: "f1", Deadline: 123, Pending: true}
			second := Claim{Ticket: "BBBBBBBBBBBBBBBBBBBBBB", Fingerprint: "f2", Deadline: 456, Pending: true}
			steps := []struct {
				name    string
				do      func() (Claim, bool, error)
				want    Claim
				claimed bool
			}{
				{"first claim", func() (Claim, bool, error) { return a.ClaimRequest(ctx, "shop", id, first, time.Minute) }, first, true},
				{"a retry through the other checker", func() (Claim, bool, error) { return b.ClaimRequest(ctx, "shop", id, second, time.Minute) }, first, false},
				{"confirmed", func() (Claim, bool, error) {
					if err := a.ConfirmRequest(ctx, "shop", id, first, time.Hour); err != nil {
						return Claim{}, false, err
					}
					return b.ClaimRequest(ctx, "shop", id, second, time.Minute)
				}, Claim{Ticket: first.Ticket, Fingerprint: "f1", Deadline: 123}, false},
				{"another's release is a no-op", func() (Claim, bool, error) {
					if err := b.ReleaseRequest(ctx, "shop", id, second.Ticket); err != nil {
						return Claim{}, false, err
					}
					return b.ClaimRequest(ctx, "shop", id, second, time.Minute)
				}, Claim{Ticket: first.Ticket, Fingerprint: "f1", Deadline: 123}, false},
				{"the same id in another domain", func() (Claim, bool, error) { return b.ClaimRequest(ctx, "shop2", id, second, time.Minute) }, second, true},
				// "sh"+"op"+id against "shop"+id: not one name
				{"a domain that is a prefix", func() (Claim, bool, error) { return b.ClaimRequest(ctx, "sh", "op"+id, second, time.Minute) }, second, true},
				{"the winner's release frees it", func() (Claim, bool, error) {
					if err := a.ReleaseRequest(ctx, "shop", id, first.Ticket); err != nil {
						return Claim{}, false, err
					}
					return b.ClaimRequest(ctx, "shop", id, second, time.Minute)
				}, second, true},
			}
			for i, s := range steps {
				got, claimed, err := s.do()
				if err != nil || got != s.want || claimed != s.claimed {
					t.Fatalf("step %d (%s): %+v claimed %v, %v; want %+v claimed %v", i, s.name, got, claimed, err, s.want, s.claimed)
				}
			}
			// 16 concurrent first claims of one id, through both checkers: one wins
			race := id + "-race"
			var wins atomic.Int32
			var wg sync.WaitGroup
			tickets := make([]string, 16)
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := Claim{Ticket: fmt.Sprintf("T%021d", i), Fingerprint: "f", Pending: true}
					got, claimed, err := ds[i%2].ClaimRequest(ctx, "shop", race, c, time.Minute)
					if err != nil {
						t.Error(err)
					}
					if claimed {
						wins.Add(1)
					}
					tickets[i] = got.Ticket
				}()
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("%d claims won, want 1", wins.Load())
			}
			for i := range tickets {
				if tickets[i] != tickets[0] {
					t.Fatalf("claim %d answered ticket %s, claim 0 %s", i, tickets[i], tickets[0])
				}
			}
		})
	}
}

// TestMemClaimsExpire: a pending claim lives for its pending ttl, a
// confirmed one for its own; the table stays bounded.
func TestMemClaimsExpire(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{ns: w0}
	ms := NewMemStore()
	ms.SetClock(clk)
	c := Claim{Ticket: "AAAAAAAAAAAAAAAAAAAAAA", Fingerprint: "f", Pending: true}
	if _, ok, _ := ms.ClaimRequest(ctx, "d", "r", c, time.Second); !ok {
		t.Fatal("first claim lost")
	}
	clk.ns += int64(time.Second)
	other := Claim{Ticket: "BBBBBBBBBBBBBBBBBBBBBB", Pending: true}
	if got, ok, _ := ms.ClaimRequest(ctx, "d", "r", other, time.Second); !ok || got != other {
		t.Fatalf("after the pending ttl: %+v %v, want the id free", got, ok)
	}
	if err := ms.ConfirmRequest(ctx, "d", "r", other, time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.ns += int64(59 * time.Minute)
	if got, ok, _ := ms.ClaimRequest(ctx, "d", "r", c, time.Second); ok || got.Ticket != other.Ticket || got.Pending {
		t.Fatalf("within the confirmed ttl: %+v %v", got, ok)
	}
	ms.dfr.claims.max = 1000 // MaxMemEntries, scaled down
	for i := range 5000 {
		_, _, _ = ms.ClaimRequest(ctx, "d", fmt.Sprint("x", i), c, time.Hour)
	}
	if n := ms.dfr.claims.len(); n != 1000 {
		t.Fatalf("%d claims held, want the bound's 1000", n)
	}
	if n := len(ms.dfr.claims.fifo); n > 2*1000+1024 {
		t.Fatalf("eviction queue of %d", n)
	}
}

// TestQueuedItems: issue 19, item 7. On every store and through either
// of two checkers, a key holds at most maxKey items and all keys at most
// maxBytes; a refusal names the bound and counts nothing; a finished item
// makes room; an item admitted twice counts once; an item past its
// deadline stops counting whoever forgot to finish it; 32 concurrent
// admissions of one key admit exactly maxKey.
func TestQueuedItems(t *testing.T) {
	for name, ds := range deferrals(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, b := ds[0], ds[1]
			key := "shop:user|user=" + time.Now().Format("150405.000000000")
			later, past := time.Now().Add(time.Hour), time.Now().Add(-time.Second)
			const big = int64(1) << 40 // bytes bound out of the way
			type step struct {
				name      string
				s         Deferrals
				ticket    string
				bytes     int64
				deadline  time.Time
				maxKey    int
				maxBytes  int64
				finish    bool // FinishItem instead
				admitted  bool
				full      string
				queued    int
				wantBytes int64 // checked when > 0
			}
			steps := []step{
				{name: "1", s: a, ticket: "t1", bytes: 10, deadline: later, maxKey: 3, maxBytes: big, admitted: true, queued: 1},
				{name: "2", s: b, ticket: "t2", bytes: 10, deadline: later, maxKey: 3, maxBytes: big, admitted: true, queued: 2},
				{name: "1 again", s: b, ticket: "t1", bytes: 10, deadline: later, maxKey: 3, maxBytes: big, admitted: true, queued: 2},
				{name: "3", s: a, ticket: "t3", bytes: 10, deadline: later, maxKey: 3, maxBytes: big, admitted: true, queued: 3},
				{name: "4: the key is full", s: b, ticket: "t4", bytes: 10, deadline: later, maxKey: 3, maxBytes: big, full: "key", queued: 3},
				{name: "2 finished", s: b, ticket: "t2", finish: true},
				{name: "4 now", s: a, ticket: "t4", bytes: 10, deadline: later, maxKey: 3, maxBytes: big, admitted: true, queued: 3},
				{name: "finish all", s: a, ticket: "t1", finish: true},
				{name: "finish all", s: a, ticket: "t3", finish: true},
				{name: "finish all", s: b, ticket: "t4", finish: true},
				{name: "finish one not there", s: b, ticket: "t9", finish: true},
				{name: "expired, not finished", s: a, ticket: "e1", bytes: 10, deadline: past, maxKey: 1, maxBytes: big, admitted: true, queued: 1},
				{name: "past its deadline it stops counting", s: b, ticket: "e2", bytes: 10, deadline: later, maxKey: 1, maxBytes: big, admitted: true, queued: 1},
				{name: "e2 finished", s: b, ticket: "e2", finish: true},
			}
			for i, s := range steps {
				if s.finish {
					if err := s.s.FinishItem(ctx, key, s.ticket); err != nil {
						t.Fatalf("step %d (%s): %v", i, s.name, err)
					}
					continue
				}
				got, err := s.s.AdmitItem(ctx, key, s.ticket, s.bytes, s.deadline, s.maxKey, s.maxBytes)
				if err != nil || got.Admitted != s.admitted || got.Full != s.full || got.Queued != s.queued {
					t.Fatalf("step %d (%s): %+v %v; want admitted %v full %q queued %d", i, s.name, got, err, s.admitted, s.full, s.queued)
				}
			}
			// The total is shared by every key of the store (and, on
			// Redis, by the other tests' prefixes: not here, one prefix
			// per test). Measured relative to what it holds now.
			// (a bound of 0 makes every store drop what is past its
			// deadline first)
			probe, err := a.AdmitItem(ctx, key+"-probe", "p0", 0, later, 1, 0)
			if err != nil {
				t.Fatalf("probe: %+v %v", probe, err)
			}
			base := probe.Bytes
			_ = a.FinishItem(ctx, key+"-probe", "p0")
			bsteps := []step{
				{name: "bytes 1", s: a, ticket: "b1", bytes: 400, deadline: later, maxKey: 100, maxBytes: base + 1000, admitted: true, queued: 1, wantBytes: base + 400},
				{name: "bytes 2", s: b, ticket: "b2", bytes: 400, deadline: later, maxKey: 100, maxBytes: base + 1000, admitted: true, queued: 2, wantBytes: base + 800},
				{name: "bytes 3: over", s: a, ticket: "b3", bytes: 400, deadline: later, maxKey: 100, maxBytes: base + 1000, full: "bytes", queued: 2, wantBytes: base + 800},
				{name: "b1 finished", s: b, ticket: "b1", finish: true},
				{name: "bytes 3 now", s: a, ticket: "b3", bytes: 400, deadline: later, maxKey: 100, maxBytes: base + 1000, admitted: true, queued: 2, wantBytes: base + 800},
				{name: "finish", s: a, ticket: "b2", finish: true},
				{name: "finish", s: a, ticket: "b3", finish: true},
				{name: "expired bytes", s: a, ticket: "x1", bytes: 900, deadline: past, maxKey: 100, maxBytes: base + 1000, admitted: true, queued: 1, wantBytes: base + 900},
				{name: "counted no more", s: b, ticket: "x2", bytes: 900, deadline: later, maxKey: 100, maxBytes: base + 1000, admitted: true, queued: 1, wantBytes: base + 900},
				{name: "finish", s: a, ticket: "x2", finish: true},
			}
			for i, s := range bsteps {
				if s.finish {
					if err := s.s.FinishItem(ctx, key+"-b", s.ticket); err != nil {
						t.Fatalf("bytes step %d (%s): %v", i, s.name, err)
					}
					continue
				}
				got, err := s.s.AdmitItem(ctx, key+"-b", s.ticket, s.bytes, s.deadline, s.maxKey, s.maxBytes)
				if err != nil || got.Admitted != s.admitted || got.Full != s.full || got.Queued != s.queued || got.Bytes != s.wantBytes {
					t.Fatalf("bytes step %d (%s): %+v %v; want admitted %v full %q queued %d bytes %d", i, s.name, got, err,
						s.admitted, s.full, s.queued, s.wantBytes)
				}
			}
			// 32 concurrent admissions of one key through both checkers
			race := key + "-race"
			var admitted atomic.Int32
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := ds[i%2].AdmitItem(ctx, race, fmt.Sprint("r", i), 1, later, 5, big)
					if err != nil {
						t.Error(err)
					}
					if got.Admitted {
						admitted.Add(1)
					}
				}()
			}
			wg.Wait()
			if admitted.Load() != 5 {
				t.Fatalf("%d of 32 concurrent admissions, want the bound's 5", admitted.Load())
			}
			for i := range 32 {
				_ = a.FinishItem(ctx, race, fmt.Sprint("r", i))
			}
		})
	}
}

// TestMemTicketsBounded: the in-memory ticket table holds at most
// MaxMemEntries states (scaled down), the oldest written first going
// first.
func TestMemTicketsBounded(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{ns: w0}
	ms := NewMemStore()
	ms.SetClock(clk)
	ms.tickets.t.max = 1000 // MaxMemEntries, scaled down
	for i := range 5000 {
		if err := ms.PutTicket(ctx, fmt.Sprint("t", i), Ticket{State: TicketQueued}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // written again: it keeps its place
			_ = ms.PutTicket(ctx, fmt.Sprint("t", i), Ticket{State: TicketQueued, Attempts: 1}, time.Hour)
		}
	}
	if n := ms.tickets.t.len(); n != 1000 {
		t.Fatalf("%d tickets held, want the bound's 1000", n)
	}
	if _, ok, _ := ms.GetTicket(ctx, "t3999"); ok {
		t.Fatal("an old ticket is still there")
	}
	if _, ok, _ := ms.GetTicket(ctx, "t4000"); !ok {
		t.Fatal("a ticket of the newest 1000 is gone")
	}
	// expired ones are swept without eviction: past the hour, 5000 more
	// writes leave only the newest
	clk.ns += int64(2 * time.Hour)
	for i := range 3000 {
		_ = ms.PutTicket(ctx, fmt.Sprint("u", i), Ticket{State: TicketQueued}, time.Minute)
	}
	if n := ms.tickets.t.len(); n > 1000 {
		t.Fatalf("%d tickets held", n)
	}
	if len(ms.tickets.t.fifo) > 2*1000+1024 {
		t.Fatalf("eviction queue of %d", len(ms.tickets.t.fifo))
	}
}

// TestMemQueuedItemsLeave: items past their deadline leave the count in
// deadline order, and their keys with them, even a key nobody asks about
// again; the work per admission follows what expired, not what is held.
func TestMemQueuedItemsLeave(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{ns: w0}
	ms := NewMemStore()
	ms.SetClock(clk)
	at := func(d time.Duration) time.Time { return time.Unix(0, w0).Add(d) }
	for i := range 1000 {
		if a, err := ms.AdmitItem(ctx, fmt.Sprint("k", i), fmt.Sprint("t", i), 10, at(time.Duration(i+1)*time.Second), 5, 1<<40); err != nil || !a.Admitted {
			t.Fatalf("item %d: %+v %v", i, a, err)
		}
	}
	clk.ns += int64(500 * time.Second) // items 0..499 are past their deadline
	a, err := ms.AdmitItem(ctx, "other", "x", 10, at(time.Hour), 5, 1<<40)
	if err != nil || !a.Admitted || a.Bytes != 10*501 {
		t.Fatalf("after 500 expired: %+v %v, want 501 items' bytes", a, err)
	}
	if n := len(ms.dfr.keys); n != 501 {
		t.Fatalf("%d keys held, want 501 (the expired ones' keys gone)", n)
	}
	for i := 500; i < 1000; i++ {
		_ = ms.FinishItem(ctx, fmt.Sprint("k", i), fmt.Sprint("t", i))
	}
	_ = ms.FinishItem(ctx, "other", "x")
	if n, b := ms.QueuedItems("other"); n != 0 || b != 0 || len(ms.dfr.keys) != 0 || len(ms.dfr.all.h) > 64 {
		t.Fatalf("all finished: %d items, %d bytes, %d keys, heap of %d", n, b, len(ms.dfr.keys), len(ms.dfr.all.h))
	}
}
