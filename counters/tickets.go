package counters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ticket states of a deferred request, as GET /v1/deferred/{ticket} shows
// them. Delivered, Expired and Failed are terminal: once stored, a later
// write of a non-terminal state does not replace them (a drain that
// re-reads an item after a crash must not make it look queued again).
const (
	TicketQueued    = "queued"
	TicketDelivered = "delivered"
	TicketExpired   = "expired"
	TicketFailed    = "failed"
)

// TicketTerminal reports whether state is one of the terminal states.
func TicketTerminal(state string) bool {
	return state == TicketDelivered || state == TicketExpired || state == TicketFailed
}

// Ticket is the stored state of one deferred request.
type Ticket struct {
	State       string
	Attempts    int   // deliveries tried
	EnqueuedAt  int64 // unix ns
	DeliveredAt int64 // unix ns; 0 until delivered
	Reason      string
}

// Tickets keeps the state of deferred requests for ttl after each write.
// PutTicket merges: a terminal state stays, attempts only grow, a zero
// time or empty reason leaves the stored one.
type Tickets interface {
	PutTicket(ctx context.Context, id string, t Ticket, ttl time.Duration) error
	GetTicket(ctx context.Context, id string) (Ticket, bool, error)
}

// putTicket merges one ticket's state into its hash. KEYS[1] the hash;
// ARGV: state, attempts, enqueued_at, delivered_at, reason, ttl ms.
var putTicket = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 's')
local terminal = cur == 'delivered' or cur == 'expired' or cur == 'failed'
if not terminal then
  redis.call('HSET', KEYS[1], 's', ARGV[1])
  if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'r', ARGV[5]) end
end
local a = tonumber(redis.call('HGET', KEYS[1], 'a') or '0')
if tonumber(ARGV[2]) > a then redis.call('HSET', KEYS[1], 'a', ARGV[2]) end
if ARGV[3] ~= '0' and not redis.call('HGET', KEYS[1], 'e') then redis.call('HSET', KEYS[1], 'e', ARGV[3]) end
if ARGV[4] ~= '0' and not redis.call('HGET', KEYS[1], 'd') then redis.call('HSET', KEYS[1], 'd', ARGV[4]) end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
`)

func (r *Redis) ticketKey(id string) string { return r.prefix + ":dfr:{" + id + "}" }

// PutTicket implements Tickets: one script on the ticket's own slot.
func (r *Redis) PutTicket(ctx context.Context, id string, t Ticket, ttl time.Duration) error {
	if id == "" || t.State == "" {
		return errors.New("counters: a ticket needs an id and a state")
	}
	err := putTicket.Run(ctx, r.c, []string{r.ticketKey(id)}, t.State, t.Attempts, t.EnqueuedAt, t.DeliveredAt,
		t.Reason, max(ttl.Milliseconds(), 1)).Err()
	if err != nil {
		return unavailable("ticket", err)
	}
	return nil
}

// GetTicket implements Tickets.
func (r *Redis) GetTicket(ctx context.Context, id string) (Ticket, bool, error) {
	m, err := r.c.HGetAll(ctx, r.ticketKey(id)).Result()
	if err != nil {
		return Ticket{}, false, unavailable("ticket", err)
	}
	if len(m) == 0 || m["s"] == "" {
		return Ticket{}, false, nil
	}
	t := Ticket{State: m["s"], Reason: m["r"]}
	var perr error
	num := func(f string) int64 {
		if m[f] == "" {
			return 0
		}
		v, err := strconv.ParseInt(m[f], 10, 64)
		if err != nil && perr == nil {
			perr = fmt.Errorf("counters: ticket %s field %s: %w", id, f, err)
		}
		return v
	}
	t.Attempts, t.EnqueuedAt, t.DeliveredAt = int(num("a")), num("e"), num("d")
	return t, true, perr
}

// memTickets is MemStore's ticket table (bounded: see MaxMemEntries).
type memTickets struct {
	mu sync.Mutex
	t  memTable[Ticket]
}

// PutTicket implements Tickets on the store's clock.
func (s *MemStore) PutTicket(_ context.Context, id string, t Ticket, ttl time.Duration) error {
	if s.down.Load() {
		return fmt.Errorf("%w: in-memory store switched off", ErrStoreUnavailable)
	}
	if id == "" || t.State == "" {
		return errors.New("counters: a ticket needs an id and a state")
	}
	now := s.now()
	s.tickets.mu.Lock()
	defer s.tickets.mu.Unlock()
	cur, ok := s.tickets.t.get(id, now)
	terminal := ok && TicketTerminal(cur.State)
	if !terminal {
		cur.State = t.State
		if t.Reason != "" {
			cur.Reason = t.Reason
		}
	}
	cur.Attempts = max(cur.Attempts, t.Attempts)
	if cur.EnqueuedAt == 0 {
		cur.EnqueuedAt = t.EnqueuedAt
	}
	if cur.DeliveredAt == 0 {
		cur.DeliveredAt = t.DeliveredAt
	}
	s.tickets.t.put(id, cur, now+int64(max(ttl, time.Millisecond)), now)
	return nil
}

// GetTicket implements Tickets.
func (s *MemStore) GetTicket(_ context.Context, id string) (Ticket, bool, error) {
	if s.down.Load() {
		return Ticket{}, false, fmt.Errorf("%w: in-memory store switched off", ErrStoreUnavailable)
	}
	s.tickets.mu.Lock()
	defer s.tickets.mu.Unlock()
	t, ok := s.tickets.t.get(id, s.now())
	return t, ok, nil
}
