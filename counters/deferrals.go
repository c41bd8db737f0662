package counters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Deferrals is what the deferred queue and its drains share through the
// counter store, besides ticket states: every checker and every drain sees
// the same answers, so a request id deferred through one checker is known
// to the next, and the items queued under a key or in all are counted
// where the drain that finishes them can count them down.
//
// Request ids: ClaimRequest binds (domain, request id) to the first
// ticket issued for it — a SETNX: one claim wins, every later one reads
// the winner's. A claim is pending until ConfirmRequest (the item is on
// the topic) and lives for pendingTTL until then, so a checker that dies
// mid-way frees the id soon; ReleaseRequest drops a claim whose item was
// not queued.
//
// Queued items: AdmitItem counts an item in its key's set and in the
// total of bytes queued, refusing past maxKey items for the key or
// maxBytes in all; FinishItem takes it out (delivered, dead-lettered or
// expired). An item is counted until its deadline at most, whatever
// happens, so a checker that dies between admitting and publishing, or a
// drain that dies before finishing, leaks nothing for longer than the
// rule's max_age.
type Deferrals interface {
	Tickets
	ClaimRequest(ctx context.Context, domain, requestID string, c Claim, pendingTTL time.Duration) (Claim, bool, error)
	ConfirmRequest(ctx context.Context, domain, requestID string, c Claim, ttl time.Duration) error
	ReleaseRequest(ctx context.Context, domain, requestID, ticket string) error
	AdmitItem(ctx context.Context, key, ticket string, bytes int64, deadline time.Time, maxKey int, maxBytes int64) (Admission, error)
	FinishItem(ctx context.Context, key, ticket string) error
}

// Claim is the ticket a request id was deferred under: the request's
// fingerprint (a hash of what makes it the request it is, so that another
// request under the same id is told apart), the item's deadline, and
// whether the item is on the topic yet.
type Claim struct {
	Ticket      string
	Fingerprint string
	Deadline    int64 // unix ns
	Pending     bool
}

// encode is a claim as stored: "ticket fingerprint deadline p|q".
func (c Claim) encode() string {
	state := "q"
	if c.Pending {
		state = "p"
	}
	return c.Ticket + " " + c.Fingerprint + " " + strconv.FormatInt(c.Deadline, 10) + " " + state
}

func decodeClaim(s string) (Claim, error) {
	f := strings.Fields(s)
	if len(f) != 4 || (f[3] != "p" && f[3] != "q") {
		return Claim{}, fmt.Errorf("counters: request claim %q: want ticket, fingerprint, deadline and state", s)
	}
	dl, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return Claim{}, fmt.Errorf("counters: request claim %q: deadline: %w", s, err)
	}
	return Claim{Ticket: f[0], Fingerprint: f[1], Deadline: dl, Pending: f[3] == "p"}, nil
}

// Admission is AdmitItem's answer: admitted, or refused by the key's
// bound (Key) or the total's (Bytes), with what is queued now.
type Admission struct {
	Admitted bool
	// Full names the bound that refused: "key" (the rule's
	// defer.max_queued) or "bytes" (deferred.max_bytes); "" when admitted.
	Full string
	// Queued is the key's items and Bytes the total queued, after the
	// admission (before it, when refused).
	Queued int
	Bytes  int64
}

// requestName is the stored name of (domain, request id): a hash, so
// that the encoding is injective whatever the two hold (a length prefix
// keeps "a"+"bc" from "ab"+"c"), the key's length is bounded, and braces
// in an id cannot move the key's hash tag.
func requestName(domain, requestID string) string {
	h := sha256.New()
	h.Write([]byte(strconv.Itoa(len(domain))))
	h.Write([]byte{':'})
	h.Write([]byte(domain))
	h.Write([]byte(requestID))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// queueName is a counter key's name in the queued-item keys (hashed, as
// requestName, for the same reasons).
func queueName(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:16])
}

func (r *Redis) requestKey(domain, id string) string {
	return r.prefix + ":dfrid:{" + requestName(domain, id) + "}"
}
func (r *Redis) queueKey(key string) string { return r.prefix + ":dfq:{" + queueName(key) + "}" }

// the total's two keys share one hash tag: one slot, one script
func (r *Redis) totalKeys() []string {
	return []string{r.prefix + ":{dfqall}:z", r.prefix + ":{dfqall}:h"}
}

// claimRequest is a SETNX that answers the winner. KEYS[1] the claim;
// ARGV: the claim, its ttl in ms. Returns the stored claim, or false
// (nil) when this one was stored.
var claimRequest = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then return cur end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
`)

// swapRequest replaces a claim only if it is still ARGV[1]: with ARGV[2]
// for ARGV[3] ms, or deletes it when ARGV[2] is empty.
var swapRequest = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local t = string.match(cur, '^(%S+)')
if t ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
return 1
`)

// ClaimRequest implements Deferrals: it stores c for (domain, requestID)
// unless a claim is there, and returns the claim that stands and whether
// it is c.
func (r *Redis) ClaimRequest(ctx context.Context, domain, requestID string, c Claim, pendingTTL time.Duration) (Claim, bool, error) {
	v, err := claimRequest.Run(ctx, r.c, []string{r.requestKey(domain, requestID)}, c.encode(), max(pendingTTL.Milliseconds(), 1)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return c, true, nil
	case err != nil:
		return Claim{}, false, unavailable("request claim", err)
	}
	s, ok := v.(string)
	if !ok {
		return Claim{}, false, fmt.Errorf("counters: request claim: unexpected reply %T", v)
	}
	cur, err := decodeClaim(s)
	return cur, false, err
}

// ConfirmRequest implements Deferrals: c (this ticket's claim) is marked
// queued and kept for ttl, if it still stands.
func (r *Redis) ConfirmRequest(ctx context.Context, domain, requestID string, c Claim, ttl time.Duration) error {
	c.Pending = false
	err := swapRequest.Run(ctx, r.c, []string{r.requestKey(domain, requestID)}, c.Ticket, c.encode(), max(ttl.Milliseconds(), 1)).Err()
	return unavailable("request claim", err)
}

// ReleaseRequest implements Deferrals: ticket's claim is dropped, if it
// still stands.
func (r *Redis) ReleaseRequest(ctx context.Context, domain, requestID, ticket string) error {
	err := swapRequest.Run(ctx, r.c, []string{r.requestKey(domain, requestID)}, ticket, "", 0).Err()
	return unavailable("request claim", err)
}

// admitKey counts an item in its key's set (member ticket, score its
// deadline in ms), dropping the members past their deadline first (on
// the server's clock). KEYS[1] the set; ARGV: ticket, deadline ms, the
// bound. Returns {admitted 0|1, members}.
var admitKey = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {1, redis.call('ZCARD', KEYS[1])} end
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[3]) then return {0, n} end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local ttl = tonumber(ARGV[2]) - now + 60000
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return {1, n + 1}
`)

// admitTotal counts an item's bytes in the total: KEYS[1] a set of
// tickets by deadline (ms), KEYS[2] a hash ticket → bytes with the sum in
// field "_". Up to 256 members past their deadline are dropped first (a
// leak, bounded). ARGV: ticket, deadline ms, bytes, the bound. Returns
// {admitted 0|1, bytes queued}.
var admitTotal = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 256)
for _, m in ipairs(old) do
  local b = redis.call('HGET', KEYS[2], m)
  if b then redis.call('HINCRBY', KEYS[2], '_', -tonumber(b)); redis.call('HDEL', KEYS[2], m) end
  redis.call('ZREM', KEYS[1], m)
end
local total = tonumber(redis.call('HGET', KEYS[2], '_') or '0')
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {1, total} end
if total + tonumber(ARGV[3]) > tonumber(ARGV[4]) then return {0, total} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
total = redis.call('HINCRBY', KEYS[2], '_', ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local ttl = tonumber(ARGV[2]) - now + 60000
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
return {1, total}
`)

// finishKey and finishTotal take a ticket out of its key's set and the
// total (no-ops for a ticket not counted).
var finishKey = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)

var finishTotal = redis.NewScript(`
local b = redis.call('HGET', KEYS[2], ARGV[1])
if b then redis.call('HINCRBY', KEYS[2], '_', -tonumber(b)); redis.call('HDEL', KEYS[2], ARGV[1]) end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
`)

// AdmitItem implements Deferrals: two scripts, the key's set and then the
// total (each on its own slot); a refusal of the total takes the item out
// of the key's set again.
func (r *Redis) AdmitItem(ctx context.Context, key, ticket string, bytes int64, deadline time.Time, maxKey int, maxBytes int64) (Admission, error) {
	dl := deadline.UnixMilli()
	v, err := admitKey.Run(ctx, r.c, []string{r.queueKey(key)}, ticket, dl, maxKey).Int64Slice()
	if err != nil || len(v) != 2 {
		return Admission{}, unavailable("queued items", replyErr(err, v))
	}
	a := Admission{Queued: int(v[1])}
	if v[0] == 0 {
		a.Full = "key"
		return a, nil
	}
	w, err := admitTotal.Run(ctx, r.c, r.totalKeys(), ticket, dl, bytes, maxBytes).Int64Slice()
	if err != nil || len(w) != 2 {
		_ = finishKey.Run(context.WithoutCancel(ctx), r.c, []string{r.queueKey(key)}, ticket).Err()
		return Admission{}, unavailable("queued bytes", replyErr(err, w))
	}
	a.Bytes = w[1]
	if w[0] == 0 {
		a.Full, a.Queued = "bytes", a.Queued-1
		if err := finishKey.Run(ctx, r.c, []string{r.queueKey(key)}, ticket).Err(); err != nil {
			return a, unavailable("queued items", err)
		}
		return a, nil
	}
	a.Admitted = true
	return a, nil
}

// FinishItem implements Deferrals.
func (r *Redis) FinishItem(ctx context.Context, key, ticket string) error {
	if err := finishKey.Run(ctx, r.c, []string{r.queueKey(key)}, ticket).Err(); err != nil {
		return unavailable("queued items", err)
	}
	return unavailable("queued bytes", finishTotal.Run(ctx, r.c, r.totalKeys(), ticket).Err())
}

// replyErr is err, or one saying the reply had the wrong shape.
func replyErr(err error, v []int64) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("unexpected reply %v", v)
}
