package deferred

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// ErrPayloadTooLarge is a payload above its rule's max_payload_bytes (HTTP
// 413); it arrives in a *ratelimit.FieldError naming the payload field.
var ErrPayloadTooLarge = errors.New("payload too large")

// ErrNotDeferred is Enqueue called with a decision that is not a defer.
var ErrNotDeferred = errors.New("deferred: the decision is not a defer")

// ErrQueueFull is a request refused because the queue is at one of its
// bounds (a *FullError says which): waiting can help, as items finish.
var ErrQueueFull = errors.New("deferred queue full")

// ErrRequestInFlight is a request whose request id is being queued by
// another call that has not finished (HTTP 409): retrying soon gets its
// ticket. It arrives in a *ratelimit.FieldError naming request_id.
var ErrRequestInFlight = errors.New("a request with this request id is being queued; retry to get its ticket")

// Bounds of the queue, as FullError names them (and the metric's reason).
const (
	BoundMaxQueued = "max_queued" // the rule's defer.max_queued, per counter key
	BoundMaxBytes  = "max_bytes"  // deferred.max_bytes, in all
)

// FullError says which bound refused a request and what it holds.
type FullError struct {
	Bound  string // BoundMaxQueued or BoundMaxBytes
	Rule   string // the deferring rule
	Limit  int64  // the bound
	Queued int64  // items of the key, or bytes in all, queued now
}

func (e *FullError) Error() string {
	if e.Bound == BoundMaxQueued {
		return fmt.Sprintf("deferred: not queued: the key holds %d items, rule %s's defer.max_queued is %d", e.Queued, e.Rule, e.Limit)
	}
	return fmt.Sprintf("deferred: not queued: %d bytes are queued in all, deferred.max_bytes is %d", e.Queued, e.Limit)
}

// Unwrap makes a FullError an ErrQueueFull.
func (e *FullError) Unwrap() error { return ErrQueueFull }

// claimPending is how long a request id's claim holds before its item is
// on the topic: past it a claim whose checker died mid-way frees the id.
const claimPending = 30 * time.Second

// DefaultRetention is how long a ticket's state stays readable after its
// deadline.
const DefaultRetention = 24 * time.Hour

// Queue appends deferred requests to the deferred topic. Safe for
// concurrent use; it is called after a decision, off the decision's own
// path, and each call waits for the topic's acknowledgement.
type Queue struct {
	hasher    Hasher
	pub       events.Publisher
	store     counters.Deferrals
	now       func() time.Time
	retention time.Duration
	maxBytes  int64

	mu    sync.Mutex
	ahead map[string]*streak // per counter key: this process's recent enqueues, for the estimate

	// Counters for metrics.
	Enqueued      atomic.Uint64 // items acknowledged by the topic
	EnqueueErrors atomic.Uint64 // items the topic or the ticket store refused: their requests were answered deny
	Refused       atomic.Uint64 // payloads refused (too large or malformed)
	FullKey       atomic.Uint64 // requests refused at their rule's defer.max_queued
	FullBytes     atomic.Uint64 // requests refused at deferred.max_bytes
	Repeats       atomic.Uint64 // requests whose request id was deferred before: answered its ticket, not queued again
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
	Hashed(req *ratelimit.Request) *ratelimit.Request
}

// WithHasher makes the queue write the values of hash_values rules as the
// checker's counters hold them (hashed), never raw; without it (an engine
// that does not hash) they are written as given.
func (q *Queue) WithHasher(h Hasher) *Queue {
	q.hasher = h
	return q
}

// WithMaxBytes bounds the bytes of items queued in all (every key, every
// checker sharing the store): deferred.max_bytes. Without it the bound is
// config.DefaultDeferredMaxBytes.
func (q *Queue) WithMaxBytes(n int64) *Queue {
	if n > 0 {
		q.maxBytes = n
	}
	return q
}

// NewQueue returns a queue publishing to pub and keeping tickets, request
// ids and the count of queued items in store, on clock now (nil:
// time.Now); ticket states live until an item's deadline plus retention
// (0: DefaultRetention).
func NewQueue(pub events.Publisher, store counters.Deferrals, now func() time.Time, retention time.Duration) *Queue {
	if now == nil {
		now = time.Now
	}
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &Queue{pub: pub, store: store, now: now, retention: retention, maxBytes: config.DefaultDeferredMaxBytes,
		ahead: map[string]*streak{}}
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
	// Repeat says the request id was deferred before: Ticket is that
	// request's, and nothing was queued now.
	Repeat bool
}

// Enqueuer queues deferred requests: what an API that answers defer takes
// (the HTTP API, package middleware); [*Queue] is one. An error means the
// request is not queued and must be refused ([ratelimit.Decision.Refuse]).
type Enqueuer interface {
	Enqueue(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision, p *Payload) (Receipt, error)
}

// Enqueue turns a Deferred decision on req into an item carrying p (nil:
// no payload) and appends it to the topic. The ticket's state is written
// before the record, so that a ticket an API returns is always readable;
// an error means the item is not queued and the caller must refuse the
// request (nothing was charged for it).
//
// A request with a request id is queued once: the id is claimed in the
// store first (shared by every checker), and a request whose id was
// deferred before gets that request's ticket (Receipt.Repeat) and is not
// queued again; another request under the id is refused with
// ratelimit.ErrRequestIDConflict, and one whose first is still being queued
// with ErrRequestInFlight (both naming request_id). The item is then
// admitted within the rule's defer.max_queued for its key and
// deferred.max_bytes in all, or refused with a *FullError.
func (q *Queue) Enqueue(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision, p *Payload) (Receipt, error) {
	if d.Code != ratelimit.Deferred {
		return Receipt{}, ErrNotDeferred
	}
	idx := -1
	for i := range d.Statuses {
		if d.Statuses[i].Code == ratelimit.Deferred && d.Statuses[i].Rule != nil {
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
			var fe *ratelimit.FieldError
			if errors.As(err, &fe) && fe.Field == "payload.body" {
				return Receipt{}, &ratelimit.FieldError{Field: "payload", Err: fmt.Errorf("%w: %v", ErrPayloadTooLarge, fe.Err)}
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
	// What is undone when the item does not get onto the topic, if the
	// store answers (off ctx: a caller gone must not leave a claim or a
	// count behind).
	bg := context.WithoutCancel(ctx)
	var undo []func()
	var claimed *counters.Claim
	fail := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if req.RequestID != "" {
		claim := counters.Claim{Ticket: it.Ticket, Fingerprint: fingerprint(it), Deadline: it.Deadline.UnixNano(), Pending: true}
		cur, won, err := q.store.ClaimRequest(ctx, req.Domain, req.RequestID, claim, claimPending)
		switch {
		case err != nil:
			q.EnqueueErrors.Add(1)
			return Receipt{}, fmt.Errorf("deferred: claim the request id: %w", err)
		case !won && cur.Fingerprint != claim.Fingerprint:
			return Receipt{}, &ratelimit.FieldError{Field: "request_id", Err: fmt.Errorf("%w: it was deferred as ticket %s",
				ratelimit.ErrRequestIDConflict, cur.Ticket)}

		case !won && cur.Pending:
			return Receipt{}, &ratelimit.FieldError{Field: "request_id", Err: ErrRequestInFlight}
		case !won:
			q.Repeats.Add(1)
			return Receipt{Ticket: cur.Ticket, Rule: r, Deadline: time.Unix(0, cur.Deadline).UTC(), ETA: max(st.RetryAfter, 0),
				Repeat: true}, nil
		}
		undo = append(undo, func() { _ = q.store.ReleaseRequest(bg, req.Domain, req.RequestID, it.Ticket) })
		claimed = &claim
	}
	maxKey := r.Defer.MaxQueued
	if maxKey <= 0 { // a rule made other than by config.Compile
		maxKey = config.DefaultMaxQueued(r)
	}
	adm, err := q.store.AdmitItem(ctx, it.Key, it.Ticket, int64(len(v)), it.Deadline, int(maxKey), q.maxBytes)
	switch {
	case err != nil:
		fail()
		q.EnqueueErrors.Add(1)
		return Receipt{}, fmt.Errorf("deferred: count the item: %w", err)
	case adm.Full == "key":
		fail()
		q.FullKey.Add(1)
		return Receipt{}, &FullError{Bound: BoundMaxQueued, Rule: r.ID, Limit: maxKey, Queued: int64(adm.Queued)}
	case !adm.Admitted:
		fail()
		q.FullBytes.Add(1)
		return Receipt{}, &FullError{Bound: BoundMaxBytes, Rule: r.ID, Limit: q.maxBytes, Queued: adm.Bytes}
	}
	undo = append(undo, func() { _ = q.store.FinishItem(bg, it.Key, it.Ticket) })
	if err := q.store.PutTicket(ctx, it.Ticket, counters.Ticket{State: counters.TicketQueued, EnqueuedAt: now.UnixNano()}, ttl); err != nil {
		fail()
		q.EnqueueErrors.Add(1)
		return Receipt{}, fmt.Errorf("deferred: record ticket: %w", err)
	}
	if err := q.pub.Publish(ctx, []events.Message{{Key: []byte(it.Key), Value: v}}); err != nil {
		fail()
		q.EnqueueErrors.Add(1)
		// the ticket was handed to nobody; record why, if the store
		// answers (in words that name no broker: a ticket is public)
		_ = q.store.PutTicket(bg, it.Ticket, counters.Ticket{State: counters.TicketFailed,
			Reason: "not queued: the deferred topic did not take it"}, ttl)
		return Receipt{}, fmt.Errorf("deferred: append to the deferred topic: %w", err)
	}
	if claimed != nil {
		// the claim now stands for as long as the ticket. A failure leaves
		// it pending until it lapses (a retry meanwhile is told to retry,
		// and after claimPending is queued anew): the item is on the
		// topic, so this is no error of the request's.
		_ = q.store.ConfirmRequest(bg, req.Domain, req.RequestID, *claimed, ttl)
	}
	q.Enqueued.Add(1)
	return Receipt{Ticket: it.Ticket, Rule: r, Deadline: it.Deadline,
		ETA: max(st.RetryAfter, 0) + q.behind(it.Key, r, req.HitsOf(idx), now)}, nil
}

// fingerprint is what makes an item the request it is, for a request
// id's claim: domain, descriptors (as the counters hold them: hashed
// values stay hashed), hits and payload, hashed (SHA-256, 16 bytes hex;
// JSON of the fields, deterministic: struct order, sorted header names).
// Stable across checkers, unlike the checker's own fingerprint, whose
// seed is per process.
func fingerprint(it *Item) string {
	b, _ := json.Marshal(struct {
		Domain      string       `json:"d"`
		Descriptors []Descriptor `json:"s"`
		Hits        int64        `json:"h"`
		Payload     *Payload     `json:"p"`
	}{it.Domain, it.Descriptors, it.Hits, it.Payload})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
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
