package deferred

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
)

// ErrPayloadTooLarge is a payload above its rule's max_payload_bytes (HTTP
// 413); it arrives in a *checker.FieldError naming the payload field.
var ErrPayloadTooLarge = errors.New("payload too large")

// ErrNotDeferred is Enqueue called with a decision that is not a defer.
var ErrNotDeferred = errors.New("deferred: the decision is not a defer")

// DefaultRetention is how long a ticket's state stays readable after its
// deadline.
const DefaultRetention = 24 * time.Hour

// Queue appends deferred requests to the deferred topic. Safe for
// concurrent use; it is called after a decision, off the decision's own
// path, and each call waits for the topic's acknowledgement.
type Queue struct {
	hasher    Hasher
	pub       events.Publisher
	tickets   counters.Tickets
	now       func() time.Time
	retention time.Duration

	mu    sync.Mutex
	ahead map[string]*streak // per counter key: this process's recent enqueues, for the estimate

	// Counters for metrics.
	Enqueued      atomic.Uint64 // items acknowledged by the topic
	EnqueueErrors atomic.Uint64 // items the topic or the ticket store refused: their requests were answered deny
	Refused       atomic.Uint64 // payloads refused (too large or malformed)
}

// streak counts the hits deferred for one key since the queue last
// believed it empty.
type streak struct {
	start time.Time
	hits  int64
}

// maxStreaks bounds the estimate's memory: past it the table starts over
// (estimates are then low for a window, never wrong in what they admit).
const maxStreaks = 1 << 16

// Hasher replaces the values of hash_values rules by their keyed
// hashes; *checker.Checker is one.
type Hasher interface {
	Hashed(req *checker.Request) *checker.Request
}

// WithHasher makes the queue write the values of hash_values rules as the
// checker's counters hold them (hashed), never raw; without it (an engine
// that does not hash) they are written as given.
func (q *Queue) WithHasher(h Hasher) *Queue {
	q.hasher = h
	return q
}

// NewQueue returns a queue publishing to pub and recording tickets in
// tickets, on clock now (nil: time.Now); ticket states live until an
// item's deadline plus retention (0: DefaultRetention).
func NewQueue(pub events.Publisher, tickets counters.Tickets, now func() time.Time, retention time.Duration) *Queue {
	if now == nil {
		now = time.Now
	}
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &Queue{pub: pub, tickets: tickets, now: now, retention: retention, ahead: map[string]*streak{}}
}

// Receipt is what a deferred request's caller learns.
type Receipt struct {
	Ticket string
	// ETA estimates when the item is released: the key's retry-after, plus
	// a window for every limit's worth of hits this process deferred
	// ahead of it and not yet released by that reckoning.
	ETA      time.Duration
	Rule     *config.Rule
	Deadline time.Time
}

// Enqueue turns a Deferred decision on req into an item carrying p (nil:
// no payload) and appends it to the topic. The ticket's state is written
// before the record, so that a ticket an API returns is always readable;
// an error means the item is not queued and the caller must refuse the
// request (nothing was charged for it).
func (q *Queue) Enqueue(ctx context.Context, req *checker.Request, d *checker.Decision, p *Payload) (Receipt, error) {
	if d.Code != checker.Deferred {
		return Receipt{}, ErrNotDeferred
	}
	idx := -1
	for i := range d.Statuses {
		if d.Statuses[i].Code == checker.Deferred && d.Statuses[i].Rule != nil {
			idx = i
			break
		}
	}
	if idx < 0 || idx >= len(req.Descriptors) {
		return Receipt{}, ErrNotDeferred
	}
	st := &d.Statuses[idx]
	r := st.Rule
	if p != nil {
		if err := p.Check(r.Defer.MaxPayloadBytes); err != nil {
			q.Refused.Add(1)
			var fe *checker.FieldError
			if errors.As(err, &fe) && fe.Field == "payload.body" {
				return Receipt{}, &checker.FieldError{Field: "payload", Err: fmt.Errorf("%w: %v", ErrPayloadTooLarge, fe.Err)}
			}
			return Receipt{}, err
		}
	}
	now := q.now()
	src := req
	if q.hasher != nil {
		src = q.hasher.Hashed(req)
	}
	it := &Item{V: ItemVersion, Ticket: NewTicket(), Domain: req.Domain, Rule: r.ID,
		Key: string(config.AppendCounterKey(nil, r, src.Descriptors[idx].Entries)), Hits: req.Hits,
		EnqueuedAt: now.UTC(), Deadline: now.Add(r.Defer.MaxAge).UTC(), Payload: p,
		Descriptors: make([]Descriptor, len(src.Descriptors)), Hashed: src != req}
	for i, dd := range src.Descriptors {
		es := make([]Entry, len(dd.Entries))
		for j, e := range dd.Entries {
			es[j] = Entry{Key: e.Key, Value: e.Value}
		}
		it.Descriptors[i].Entries = es
		if dd.HasHits {
			h := dd.Hits
			it.Descriptors[i].Hits = &h
		}
		if it.Hashed && i < len(d.Statuses) && d.Statuses[i].Rule != nil {
			it.Descriptors[i].Rule = d.Statuses[i].Rule.ID
		}
	}
	v, err := Encode(it)
	if err != nil {
		q.EnqueueErrors.Add(1)
		return Receipt{}, fmt.Errorf("deferred: encode item: %w", err)
	}
	ttl := r.Defer.MaxAge + q.retention
	if err := q.tickets.PutTicket(ctx, it.Ticket, counters.Ticket{State: counters.TicketQueued, EnqueuedAt: now.UnixNano()}, ttl); err != nil {
		q.EnqueueErrors.Add(1)
		return Receipt{}, fmt.Errorf("deferred: record ticket: %w", err)
	}
	if err := q.pub.Publish(ctx, []events.Message{{Key: []byte(it.Key), Value: v}}); err != nil {
		q.EnqueueErrors.Add(1)
		// the ticket was handed to nobody; record why, if the store
		// answers (in words that name no broker: a ticket is public)
		_ = q.tickets.PutTicket(context.WithoutCancel(ctx), it.Ticket, counters.Ticket{State: counters.TicketFailed,
			Reason: "not queued: the deferred topic did not take it"}, ttl)
		return Receipt{}, fmt.Errorf("deferred: append to the deferred topic: %w", err)
	}
	q.Enqueued.Add(1)
	return Receipt{Ticket: it.Ticket, Rule: r, Deadline: it.Deadline,
		ETA: max(st.RetryAfter, 0) + q.behind(it.Key, r, req.HitsOf(idx), now)}, nil
}

// behind estimates how long the hits this process deferred for key ahead
// of these take to release: one window per limit's worth.
func (q *Queue) behind(key string, r *config.Rule, hits int64, now time.Time) time.Duration {
	if r.Limit <= 0 || r.Window <= 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.ahead[key]
	if s == nil {
		if len(q.ahead) >= maxStreaks {
			clear(q.ahead)
		}
		s = &streak{start: now}
		q.ahead[key] = s
	}
	released := r.Limit * int64(now.Sub(s.start)/r.Window)
	ahead := s.hits - released
	if ahead <= 0 {
		s.start, s.hits, ahead = now, 0, 0
	}
	s.hits += hits
	return time.Duration(ahead/r.Limit) * r.Window
}
