package counters

import (
	"context"
	"time"
)

// memDeferrals is MemStore's part of Deferrals: request-id claims (a
// bounded table) and the queued items, per key and in all, as the Redis
// keys hold them.
type memDeferrals struct {
	claims memTable[Claim]
	keys   map[string]map[string]int64 // counter key → ticket → deadline (unix ns)
	items  map[string]memItem          // ticket → its bytes and deadline
	bytes  int64                       // the sum of items' bytes
	admits uint64
}

type memItem struct {
	bytes, deadline int64
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

// AdmitItem implements Deferrals. Items past their deadline are dropped
// when a bound would refuse, and in a sweep every 1,024 admissions, so
// the work per call stays small far from the bounds.
func (s *MemStore) AdmitItem(_ context.Context, key, ticket string, bytes int64, deadline time.Time, maxKey int, maxBytes int64) (Admission, error) {
	if err := s.check(); err != nil {
		return Admission{}, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &s.dfr
	if d.keys == nil {
		d.keys, d.items = map[string]map[string]int64{}, map[string]memItem{}
	}
	if d.admits++; d.admits%1024 == 0 {
		d.expire(now)
	}
	set := d.keys[key]
	if _, ok := set[ticket]; ok {
		return Admission{Admitted: true, Queued: len(set), Bytes: d.bytes}, nil
	}
	if len(set) >= maxKey {
		d.expireKey(key, now)
		if set = d.keys[key]; len(set) >= maxKey {
			return Admission{Full: "key", Queued: len(set), Bytes: d.bytes}, nil
		}
	}
	if d.bytes+bytes > maxBytes {
		d.expire(now)
		set = d.keys[key]
		if d.bytes+bytes > maxBytes {
			return Admission{Full: "bytes", Queued: len(set), Bytes: d.bytes}, nil
		}
	}
	if set == nil {
		set = map[string]int64{}
		d.keys[key] = set
	}
	set[ticket] = deadline.UnixNano()
	d.items[ticket] = memItem{bytes: bytes, deadline: deadline.UnixNano()}
	d.bytes += bytes
	return Admission{Admitted: true, Queued: len(set), Bytes: d.bytes}, nil
}

// FinishItem implements Deferrals.
func (s *MemStore) FinishItem(_ context.Context, key, ticket string) error {
	if err := s.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dfr.finish(key, ticket)
	return nil
}

func (d *memDeferrals) finish(key, ticket string) {
	if set := d.keys[key]; set != nil {
		delete(set, ticket)
		if len(set) == 0 {
			delete(d.keys, key)
		}
	}
	if it, ok := d.items[ticket]; ok {
		d.bytes -= it.bytes
		delete(d.items, ticket)
	}
}

// expireKey drops key's items past their deadline (from the key's set;
// the total keeps them until expire).
func (d *memDeferrals) expireKey(key string, now int64) {
	set := d.keys[key]
	for t, dl := range set {
		if dl <= now {
			delete(set, t)
		}
	}
	if len(set) == 0 {
		delete(d.keys, key)
	}
}

// expire drops every item past its deadline.
func (d *memDeferrals) expire(now int64) {
	for key := range d.keys {
		d.expireKey(key, now)
	}
	for t, it := range d.items {
		if it.deadline <= now {
			d.bytes -= it.bytes
			delete(d.items, t)
		}
	}
}

// QueuedItems returns what the store counts as queued: the items of key
// and the bytes of all (what the tests look at).
func (s *MemStore) QueuedItems(key string) (items int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.dfr.keys[key]), s.dfr.bytes
}

var (
	_ Deferrals = (*MemStore)(nil)
	_ Deferrals = (*Redis)(nil)
)
