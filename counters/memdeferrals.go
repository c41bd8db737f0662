package counters

import (
	"container/heap"
	"context"
	"time"
)

// memDeferrals is MemStore's part of Deferrals: request-id claims (a
// bounded table) and the queued items, per key and in all, as the Redis
// keys hold them. Items past their deadline leave in deadline order (a
// heap per key and one for all), so no call looks at more than the items
// that expired: the store's lock is the checker's too.
type memDeferrals struct {
	claims memTable[Claim]
	keys   map[string]*memQueue // counter key → its items
	all    memQueue             // every item
	bytes  int64                // the sum of items' bytes
}

// memQueue is a set of tickets with their deadlines (and bytes), and a
// heap of them by deadline; entries of tickets finished since stay in the
// heap until they reach its top or the heap is rebuilt.
type memQueue struct {
	m map[string]memItem
	h deadlines
}

type memItem struct {
	bytes, deadline int64
	key             string // its counter key (in the queue of all)
}

func (q *memQueue) add(ticket string, it memItem) {
	if q.m == nil {
		q.m = map[string]memItem{}
	}
	q.m[ticket] = it
	heap.Push(&q.h, memDeadline{it.deadline, ticket})
}

// remove takes ticket out (it may stay in the heap: see expire).
func (q *memQueue) remove(ticket string) (memItem, bool) {
	it, ok := q.m[ticket]
	if ok {
		delete(q.m, ticket)
		if len(q.h) > 2*len(q.m)+64 { // mostly finished entries: rebuild
			q.h = q.h[:0]
			for t, it := range q.m {
				q.h = append(q.h, memDeadline{it.deadline, t})
			}
			heap.Init(&q.h)
		}
	}
	return it, ok
}

// expire takes out the items whose deadline is not after now and calls
// gone for each.
func (q *memQueue) expire(now int64, gone func(ticket string, it memItem)) {
	for len(q.h) > 0 && q.h[0].deadline <= now {
		top := heap.Pop(&q.h).(memDeadline)
		if it, ok := q.m[top.ticket]; ok && it.deadline == top.deadline {
			delete(q.m, top.ticket)
			if gone != nil {
				gone(top.ticket, it)
			}
		}
	}
}

type memDeadline struct {
	deadline int64
	ticket   string
}

// deadlines is a min-heap by deadline (container/heap).
type deadlines []memDeadline

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h deadlines) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlines) Push(x any)        { *h = append(*h, x.(memDeadline)) }
func (h *deadlines) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ClaimRequest implements Deferrals.
func (s *MemStore) ClaimRequest(_ context.Context, domain, requestID string, c Claim, pendingTTL time.Duration) (Claim, bool, error) {
	if err := s.check(); err != nil {
		return Claim{}, false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	name := requestName(domain, requestID)
	if cur, ok := s.dfr.claims.get(name, now); ok {
		return cur, false, nil
	}
	s.dfr.claims.put(name, c, now+int64(max(pendingTTL, time.Millisecond)), now)
	return c, true, nil
}

// ConfirmRequest implements Deferrals.
func (s *MemStore) ConfirmRequest(_ context.Context, domain, requestID string, c Claim, ttl time.Duration) error {
	if err := s.check(); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	name := requestName(domain, requestID)
	if cur, ok := s.dfr.claims.get(name, now); ok && cur.Ticket == c.Ticket {
		c.Pending = false
		s.dfr.claims.put(name, c, now+int64(max(ttl, time.Millisecond)), now)
	}
	return nil
}

// ReleaseRequest implements Deferrals.
func (s *MemStore) ReleaseRequest(_ context.Context, domain, requestID, ticket string) error {
	if err := s.check(); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	name := requestName(domain, requestID)
	if cur, ok := s.dfr.claims.get(name, now); ok && cur.Ticket == ticket {
		s.dfr.claims.del(name)
	}
	return nil
}

// AdmitItem implements Deferrals.
func (s *MemStore) AdmitItem(_ context.Context, key, ticket string, bytes int64, deadline time.Time, maxKey int, maxBytes int64) (Admission, error) {
	if err := s.check(); err != nil {
		return Admission{}, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &s.dfr
	if d.keys == nil {
		d.keys = map[string]*memQueue{}
	}
	d.all.expire(now, func(t string, it memItem) {
		d.bytes -= it.bytes
		d.dropFromKey(it.key, t) // so that a key nobody asks about again goes too
	})
	q := d.keys[key]
	if q == nil {
		q = &memQueue{}
		d.keys[key] = q
	}
	q.expire(now, nil)
	defer func() {
		if len(q.m) == 0 {
			delete(d.keys, key)
		}
	}()
	if _, ok := q.m[ticket]; ok {
		return Admission{Admitted: true, Queued: len(q.m), Bytes: d.bytes}, nil
	}
	switch {
	case len(q.m) >= maxKey:
		return Admission{Full: "key", Queued: len(q.m), Bytes: d.bytes}, nil
	case d.bytes+bytes > maxBytes:
		return Admission{Full: "bytes", Queued: len(q.m), Bytes: d.bytes}, nil
	}
	it := memItem{bytes: bytes, deadline: deadline.UnixNano(), key: key}
	q.add(ticket, it)
	d.all.add(ticket, it)
	d.bytes += bytes
	return Admission{Admitted: true, Queued: len(q.m), Bytes: d.bytes}, nil
}

// FinishItem implements Deferrals.
func (s *MemStore) FinishItem(_ context.Context, key, ticket string) error {
	if err := s.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &s.dfr
	d.dropFromKey(key, ticket)
	if it, ok := d.all.remove(ticket); ok {
		d.bytes -= it.bytes
	}
	return nil
}

// dropFromKey takes ticket out of key's items, and the key with its last.
func (d *memDeferrals) dropFromKey(key, ticket string) {
	if q := d.keys[key]; q != nil {
		q.remove(ticket)
		if len(q.m) == 0 {
			delete(d.keys, key)
		}
	}
}

// QueuedItems returns what the store counts as queued: the items of key
// and the bytes of all (what the tests look at; items past their deadline
// included until the next admission drops them).
func (s *MemStore) QueuedItems(key string) (items int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	if q := s.dfr.keys[key]; q != nil {
		n = len(q.m)
	}
	return n, s.dfr.bytes
}

var (
	_ Deferrals = (*MemStore)(nil)
	_ Deferrals = (*Redis)(nil)
)
