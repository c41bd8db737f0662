package limiter

import (
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/internal/idem"
)

// Clock returns the current time in Unix nanoseconds. Tests inject a fake;
// production uses [SystemClock].
type Clock interface {
	Now() int64
}

// SystemClock reads time.Now.
type SystemClock struct{}

// Now implements [Clock].
func (SystemClock) Now() int64 { return time.Now().UnixNano() }

// Keyed defaults.
const (
	DefaultMaxKeys        = 1 << 20
	DefaultShards         = 64
	DefaultIdempotencyTTL = time.Minute
	DefaultMaxRequestIDs  = 1 << 17
	evictionSample        = 8
)

// Keyed runs an [Algorithm] per key. It is safe for concurrent use: keys are
// spread over shards by hash, each shard behind its own mutex, so there is
// no lock shared across shards and a hot key contends only with its shard.
//
// Bounded memory. At most MaxKeys keys are kept (spread evenly over the
// shards). Creating a key in a full shard evicts the least recently used of
// a random sample of 8 of its keys (approximate LRU, O(1)). An evicted key
// that was not yet back to fresh (a bucket not full, a window not empty) is
// remembered in the shard's tombstone table: a fixed array of int64 slots,
// one per key the shard can hold, where the key's hash picks two slots and
// each keeps the latest "fresh again at" time written to it. A key created
// again reads the earlier of its two slots and starts at least as exhausted
// as a state that is fresh only then, so eviction can never hand a key a
// free full bucket. The table has no false negatives; a hash collision can
// only make a new key start more restricted, never less, until that time.
//
// Parameter changes. A call with different parameters of the same algorithm
// settles the key under the old parameters up to now, then converts and
// clamps it to the new ones (editing a limit keeps the count). A call with
// another algorithm restarts the key as exhausted until the old state would
// have been fresh.
//
// Idempotency. A call with a non-empty request id whose (key, id) was seen
// within IdempotencyTTL returns the first answer again and charges nothing.
// At most MaxRequestIDs ids are remembered; when full, expired ids are swept
// and, if still full, arbitrary ids are forgotten first. The ids live in the
// one request-id memory of the project (internal/idem, the engines' too),
// looked up and stored under the key's shard lock, so a retry racing its
// first call still waits for that call's answer; such a call also takes
// one of the memory's own shard locks, chosen by the id.
type Keyed struct {
	clock     Clock
	seed      maphash.Seed
	mask      uint64
	shards    []shard
	perShard  int
	ids       *idem.Cache[answer] // nil: request ids are not remembered
	evictions atomic.Uint64
}

type shard struct {
	mu sync.Mutex
	// keys is indexed by the key's 64-bit hash, which the shard choice needs
	// anyway, so a lookup hashes the key once; the rare second key with the
	// same hash lives in spill.
	keys  map[uint64]*entry
	spill map[string]*entry
	tombs []int64 // "fresh again at" per slot; allocated on first eviction
	_     [48]byte
}

type entry struct {
	key  string
	alg  Algorithm
	st   State
	used int64
}

// answer is a decision remembered for a (key, request id).
type answer struct {
	d   Decision
	err error
}

// Option configures [NewKeyed].
type Option interface{ apply(*keyedConfig) }

type keyedConfig struct {
	maxKeys, shards, maxIDs int
	idemTTL                 time.Duration
	clock                   Clock
}

type optionFunc func(*keyedConfig)

func (f optionFunc) apply(c *keyedConfig) { f(c) }

// WithMaxKeys bounds the number of keys kept (default [DefaultMaxKeys]).
func WithMaxKeys(n int) Option { return optionFunc(func(c *keyedConfig) { c.maxKeys = n }) }

// WithShards sets the number of lock shards, a power of two (default
// [DefaultShards]).
func WithShards(n int) Option { return optionFunc(func(c *keyedConfig) { c.shards = n }) }

// WithClock sets the clock that Allow reads (default [SystemClock]).
func WithClock(clk Clock) Option { return optionFunc(func(c *keyedConfig) { c.clock = clk }) }

// WithIdempotency sets how long a request id is remembered and how many
// are remembered at most (defaults [DefaultIdempotencyTTL],
// [DefaultMaxRequestIDs]).
func WithIdempotency(ttl time.Duration, maxIDs int) Option {
	return optionFunc(func(c *keyedConfig) { c.idemTTL, c.maxIDs = ttl, maxIDs })
}

// NewKeyed returns an empty Keyed.
func NewKeyed(opts ...Option) (*Keyed, error) {
	c := keyedConfig{maxKeys: DefaultMaxKeys, shards: DefaultShards, maxIDs: DefaultMaxRequestIDs,
		idemTTL: DefaultIdempotencyTTL, clock: SystemClock{}}
	for _, o := range opts {
		o.apply(&c)
	}
	switch {
	case c.shards <= 0 || c.shards&(c.shards-1) != 0:
		return nil, fmt.Errorf("limiter: shards %d: must be a power of two", c.shards)
	case c.maxKeys < c.shards:
		return nil, fmt.Errorf("limiter: max keys %d: must be at least the shard count %d", c.maxKeys, c.shards)
	case c.idemTTL < 0 || c.maxIDs < 0:
		return nil, errors.New("limiter: idempotency ttl and max ids must not be negative")
	case c.clock == nil:
		return nil, errors.New("limiter: nil clock")
	}
	k := &Keyed{clock: c.clock, seed: maphash.MakeSeed(), mask: uint64(c.shards - 1),
		shards: make([]shard, c.shards), perShard: c.maxKeys / c.shards}
	if c.idemTTL > 0 {
		k.ids = idem.New[answer](int64(c.idemTTL), c.maxIDs)
	}
	for i := range k.shards {
		k.shards[i].keys = make(map[uint64]*entry)
	}
	return k, nil
}

// Allow decides cost for key at the clock's current time. See [Keyed.AllowAt].
func (k *Keyed) Allow(key string, alg Algorithm, cost int64, requestID string) (Decision, error) {
	return k.AllowAt(key, alg, k.clock.Now(), cost, requestID)
}

// AllowAt decides cost for key at now under alg. It allocates only when it
// creates a key or remembers a request id. To avoid an allocation per call,
// pass alg as an interface value built once (or a pointer), not a fresh
// struct literal.
func (k *Keyed) AllowAt(key string, alg Algorithm, now, cost int64, requestID string) (d Decision, err error) {
	h := maphash.String(k.seed, key)
	sh := &k.shards[h&k.mask]
	sh.mu.Lock()
	if requestID != "" && k.ids != nil {
		// no fingerprint: an id is bound to its key only
		if a, found, _ := k.ids.Get(key, requestID, 0, now); found {
			sh.mu.Unlock()
			return a.d, a.err
		}
	}
	e := sh.keys[h]
	if e != nil && e.key != key {
		e = sh.spill[key]
	}
	if e == nil || e.alg != alg {
		if err := alg.Validate(); err != nil {
			sh.mu.Unlock()
			return Decision{RetryAfter: Never}, err
		}
		if e == nil {
			e = k.create(sh, key, h, alg, now)
		} else {
			change(e, alg, now)
		}
	}
	// decide fills d in place: returning a Decision built field by field
	// through every layer made the compiler copy it with wide loads that
	// miss store forwarding, which cost more than the algorithm itself.
	err = decide(alg, &e.st, now, cost, &d)
	if now > e.used {
		e.used = now
	}
	if requestID != "" && k.ids != nil {
		// key may alias the caller's buffer: the memory keeps copies
		k.ids.Put(strings.Clone(key), strings.Clone(requestID), 0, now, answer{d, err})
	}
	sh.mu.Unlock()
	return d, err
}

// change moves e to alg: settle and adopt within one algorithm, restart as
// exhausted across algorithms.
func change(e *entry, alg Algorithm, now int64) {
	if sameKind(e.alg, alg) {
		e.alg.settle(&e.st, now)
		alg.adopt(&e.st, e.alg, now)
	} else {
		idle := e.alg.idleAt(&e.st)
		e.st = State{}
		alg.restore(&e.st, idle, now)
	}
	e.alg = alg
}

// decide dispatches on the concrete type so that escape analysis sees a
// static call and d stays on the caller's stack (an interface call would
// move it to the heap: one allocation per decision).
func decide(alg Algorithm, s *State, now, cost int64, d *Decision) error {
	switch a := alg.(type) {
	case TokenBucket:
		return a.decide(s, now, cost, d)
	case GCRA:
		return a.decide(s, now, cost, d)
	case LeakyBucket:
		return a.decide(s, now, cost, d)
	case FixedWindow:
		return a.decide(s, now, cost, d)
	case SlidingWindow:
		return a.decide(s, now, cost, d)
	case SlidingLog:
		return a.decide(s, now, cost, d)
	}
	return &ParamError{Algorithm: fmt.Sprintf("%T", alg), Field: "type", Reason: "is not an algorithm of this package"}
}

// sameKind reports whether a and b are the same algorithm type (their
// state fields mean the same things).
func sameKind(a, b Algorithm) bool { return reflect.TypeOf(a) == reflect.TypeOf(b) }

// create adds key to a shard (requires sh.mu held), evicting first if the
// shard is full, and starts it from its tombstone if it has one.
func (k *Keyed) create(sh *shard, key string, h uint64, alg Algorithm, now int64) *entry {
	if sh.len() >= k.perShard {
		k.evict(sh, now)
	}
	e := &entry{key: strings.Clone(key), alg: alg, used: now}
	if sh.tombs != nil {
		i, j := tombSlots(h, len(sh.tombs))
		if t := min(sh.tombs[i], sh.tombs[j]); t > now {
			alg.restore(&e.st, t, now)
		}
	}
	sh.insert(h, e)
	return e
}

// insert adds e under hash h (requires sh.mu held).
func (sh *shard) insert(h uint64, e *entry) {
	if _, taken := sh.keys[h]; !taken {
		sh.keys[h] = e
		return
	}
	if sh.spill == nil {
		sh.spill = make(map[string]*entry)
	}
	sh.spill[e.key] = e
}

// len counts sh's keys (requires sh.mu held).
func (sh *shard) len() int { return len(sh.keys) + len(sh.spill) }

// remove deletes e from sh (requires sh.mu held).
func (sh *shard) remove(h uint64, e *entry) {
	if sh.keys[h] == e {
		delete(sh.keys, h)
	} else {
		delete(sh.spill, e.key)
	}
}

// evict removes the least recently used of a sample of sh's keys (requires
// sh.mu held), remembering it in the tombstones unless it was fresh.
func (k *Keyed) evict(sh *shard, now int64) {
	var victim uint64
	var ve *entry
	n := 0
	for h, e := range sh.keys { // map iteration starts at a random place
		if ve == nil || e.used < ve.used {
			victim, ve = h, e
		}
		if n++; n == evictionSample {
			break
		}
	}
	if ve == nil {
		return
	}
	if idle := ve.alg.idleAt(&ve.st); idle > now {
		if sh.tombs == nil {
			sh.tombs = make([]int64, tombSize(k.perShard))
		}
		i, j := tombSlots(victim, len(sh.tombs))
		sh.tombs[i] = max(sh.tombs[i], idle)
		sh.tombs[j] = max(sh.tombs[j], idle)
	}
	sh.remove(victim, ve)
	k.evictions.Add(1)
}

func tombSize(n int) int {
	s := 64
	for s < n {
		s <<= 1
	}
	return s
}

func tombSlots(h uint64, n int) (int, int) {
	m := uint64(n - 1)
	return int((h >> 17) & m), int((h >> 41) & m)
}

// Sweep removes every key that is back to fresh at now (it holds no
// information) and expired request ids, one shard at a time. Run it
// periodically to return the memory of idle keys early.
func (k *Keyed) Sweep(now int64) (removed int) {
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for h, e := range sh.keys {
			if e.alg.idleAt(&e.st) <= now {
				delete(sh.keys, h)
				removed++
			}
		}
		for key, e := range sh.spill {
			if e.alg.idleAt(&e.st) <= now {
				delete(sh.spill, key)
				removed++
			}
		}
		sh.mu.Unlock()
	}
	if k.ids != nil {
		k.ids.Sweep(now)
	}
	return removed
}

// Len returns the number of keys held.
func (k *Keyed) Len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += sh.len()
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many keys were evicted to stay within MaxKeys.
func (k *Keyed) Evictions() uint64 { return k.evictions.Load() }

// Reset makes key fresh under alg, as if it had never been used (also
// when an eviction left it a tombstone). It reports whether the key was
// held.
func (k *Keyed) Reset(key string, alg Algorithm) bool {
	h := maphash.String(k.seed, key)
	sh := &k.shards[h&k.mask]
	now := k.clock.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[h]
	if e != nil && e.key != key {
		e = sh.spill[key]
	}
	if e != nil {
		e.st, e.alg, e.used = State{}, alg, now
		return true
	}
	if sh.tombs == nil {
		return false // a new key starts fresh anyway
	}
	if sh.len() >= k.perShard {
		k.evict(sh, now)
	}
	sh.insert(h, &entry{key: strings.Clone(key), alg: alg, used: now}) // overrides the tombstone
	return false
}

// PeekAt decides cost for key at now exactly as AllowAt would, without
// changing anything: no charge, no key created, no request id remembered.
// Callers that must check several limits before charging any use it.
func (k *Keyed) PeekAt(key string, alg Algorithm, now, cost int64) (d Decision, err error) {
	if err := alg.Validate(); err != nil {
		return Decision{RetryAfter: Never}, err
	}
	h := maphash.String(k.seed, key)
	sh := &k.shards[h&k.mask]
	sh.mu.Lock()
	var st State
	e := sh.keys[h]
	if e != nil && e.key != key {
		e = sh.spill[key]
	}
	switch {
	case e == nil:
		if sh.tombs != nil {
			i, j := tombSlots(h, len(sh.tombs))
			if t := min(sh.tombs[i], sh.tombs[j]); t > now {
				st = restored(alg, t, now)
			}
		}
	case e.alg != alg:
		st = changed(e, alg, now)
	default:
		st = e.st
		st.log = e.st.log.clone()
	}
	sh.mu.Unlock()
	err = decide(alg, &st, now, cost, &d)
	return d, err
}

// restored and changed run the rare paths of PeekAt on heap copies, so the
// common path's state stays on the stack (passing its address to an
// interface method would move it to the heap on every call).
func restored(alg Algorithm, idleAt, now int64) State {
	s := new(State)
	alg.restore(s, idleAt, now)
	return *s
}

func changed(e *entry, alg Algorithm, now int64) State {
	tmp := &entry{alg: e.alg, st: e.st}
	tmp.st.log = e.st.log.clone()
	change(tmp, alg, now)
	return tmp.st
}

// RefundAt gives back cost that an earlier AllowAt charged key under alg
// (a request refused by another of its limits charges nothing). It never
// leaves the key better off than fresh.
func (k *Keyed) RefundAt(key string, alg Algorithm, now, cost int64) error {
	if cost < 0 {
		return ErrNegativeCost
	}
	h := maphash.String(k.seed, key)
	sh := &k.shards[h&k.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[h]
	if e != nil && e.key != key {
		e = sh.spill[key]
	}
	if e == nil || e.alg != alg || cost == 0 {
		return nil
	}
	alg.refund(&e.st, now, cost)
	return nil
}
