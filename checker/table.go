package checker

import (
	"hash/fnv"
	"hash/maphash"
	"strings"
	"sync"
	"unsafe"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/compact"
	"github.com/velvetrope/velvetrope/internal/digest"
	"github.com/velvetrope/velvetrope/internal/heapsize"
	"github.com/velvetrope/velvetrope/internal/minheap"
	"github.com/velvetrope/velvetrope/internal/rates"
	"github.com/velvetrope/velvetrope/internal/stampq"
	"github.com/velvetrope/velvetrope/internal/tally"
	"github.com/velvetrope/velvetrope/internal/tombs"
	"github.com/velvetrope/velvetrope/internal/wheel"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// entry is one counter key's state, guarded by its shard's mutex.
type entry struct {
	key     string   // counter key: rule id and request values
	skey    string   // where this instance's consumption goes: key, or a hot key's key#shard
	vals    []string // the request values (patterns where shared), compared on lookup
	next    *entry   // the next entry with the same hash
	desc    string   // descriptor text, for analytics
	hash    uint64
	created int64 // when this checker started tracking the key
	rule    *config.Rule

	ctr counter // the algorithm's state: a window counter or a bucket
	x   *extra  // near_limit: async slices, hot-key near charges: those keys only

	// what remained at the last store answer (-1: none yet) and this
	// instance's consumption since: local_budget's share while it is down
	answerRemaining, sinceAnswer int64
	rates.Rates                        // learned from store answers and measured as it decides
	overUntil                    int64 // deny from memory until then
	room, roomUntil              int64 // what a store answer left, trusted until then: a cost above it is refused
	used                         int64 // last decision
	nextRefresh                  int64
	lazyTick                     int64 // the emission wheel's tick a lazy entry waits for

	pend, pendApplied tally.Pending
	usage             tally.Minute // this minute's usage so far, carried by every delta

	// (the small fields last: no padding between them)
	// whole is the first window start from which this entry holds all its
	// instance's consumption of the key: an entry evicted before it may
	// have left hits in flight (firsttouch.go)
	whole int64

	heapIdx  int32 // index in the shard's refresh heap; -1 when not in it
	bytes    int32 // the heap it holds, as estimated when created (membytes.go)
	emit     emitState
	life     life
	restored bool // created again after an eviction while over its limit
	// active: decided on since the store last answered (else the refresher
	// parks it); stale: parked, its next decision is near whatever its band
	active, stale bool
}

// life is where an entry stands in its shard.
type life uint8

const (
	lifeHeld   life = iota // in the table and the refresh heap
	lifeParked             // unused: out of the heap, no reads, only its idle eviction, until a decision wakes it
	lifeGone               // evicted: the flusher and the refresher skip it
)

// emitState is where an entry's pending consumption waits.
type emitState uint8

const (
	emitClean emitState = iota // nothing queued
	emitDue                    // queued for the flusher's next pass (shard.dirty)
	emitLazy                   // in the emission wheel, for tick lazyTick
)

// shard is one lock domain of the key table.
type shard struct {
	mu    sync.Mutex
	keys  map[uint64]*entry // by counter hash; equal hashes chain through entry.next
	n     int
	dirty []*entry            // entries whose pending consumption goes at the next flush
	wheel wheel.Wheel[*entry] // lazy entries by flush tick
	lazyN int                 // entries waiting in the wheel
	// held is what the lazy entries hold that the store lacks (what a
	// crash loses beside the due deltas), at most MaxHeldTotal / shards.
	held int64
	// parked entries by their last use, for their idle eviction without
	// a place in the refresh heap
	parked  stampq.Queue[*entry]
	orphans []*eventsv1.Delta    // pending consumption of evicted dirty entries
	refresh minheap.Heap[*entry] // by next refresh
	tombs   tombs.Table          // allocated on first eviction
	// compact keys (compact.go): their records, their decisions since the
	// last flush, and those decisions' strings
	compact compact.Table
	fresh   []freshHits
	arena   []byte
	stats   shardStats
	// lk is the look of the decision at work (one at a time, under mu):
	// here, interface calls take its pointer with no stack value escaping.
	lk look
	_  [64]byte // the next shard's lock on another cache line
}

// lookup finds the entry of rule r for the request values es.
func (sh *shard) lookup(h uint64, r *config.Rule, es []config.Entry) *entry {
	for e := sh.keys[h]; e != nil; e = e.next {
		if e.matches(r, es) {
			return e
		}
	}
	return nil
}

// matches reports whether e is r's counter for es (rules by id: a
// reloaded rule set keeps its counters).
func (e *entry) matches(r *config.Rule, es []config.Entry) bool {
	if e.rule != r && e.rule.ID != r.ID || len(e.vals) != len(es) {
		return false
	}
	for i := range es {
		if e.vals[i] != r.CountedValue(i, es[i].Value) {
			return false
		}
	}
	return true
}

func (sh *shard) len() int { return sh.n }

func (sh *shard) insert(e *entry) {
	e.next = sh.keys[e.hash]
	sh.keys[e.hash] = e
	sh.n++
}

func (sh *shard) remove(e *entry) {
	p := sh.keys[e.hash]
	switch {
	case p == e && e.next == nil:
		delete(sh.keys, e.hash)
	case p == e:
		sh.keys[e.hash] = e.next
	default:
		for p != nil && p.next != e {
			p = p.next
		}
		if p != nil {
			p.next = e.next
		}
	}
	e.next = nil
	sh.n--
	if e.heapIdx >= 0 {
		sh.refresh.Remove(e)
	}
	if e.life == lifeParked {
		sh.parked.Staled()
	}
	e.life = lifeGone
	// The emission wheel may point at it for a turn more: what it copied
	// from the request goes now (its deltas were built first).
	e.key, e.skey, e.desc, e.vals = "", "", "", nil
}

// markDirty queues e for the next flush, reporting whether it was not
// queued yet (requires sh.mu held; a lazy entry's wheel place goes stale).
func (sh *shard) markDirty(e *entry) bool {
	switch e.emit {
	case emitDue:
		return false
	case emitLazy:
		sh.unlazy(e)
	}
	e.emit = emitDue
	sh.dirty = append(sh.dirty, e)
	return true
}

// unlazy takes a lazy e and its held hits out of the shard's counts
// before its pending consumption goes (requires sh.mu held).
func (sh *shard) unlazy(e *entry) {
	sh.lazyN--
	sh.held -= int64(e.pend.Counted)
	e.emit = emitClean
}

// markLazy queues a clean e for flush tick tick, within the wheel's span
// (requires sh.mu held); one already queued keeps its turn.
func (sh *shard) markLazy(e *entry, tick int64, slots int) {
	if e.emit != emitClean {
		return
	}
	e.emit, e.lazyTick = emitLazy, tick
	sh.lazyN++
	sh.held += int64(e.pend.Counted)
	sh.wheel.Add(e, tick, slots)
}

// schedule (re)places e in the refresh heap at t (requires sh.mu held).
func (sh *shard) schedule(e *entry, t int64) {
	e.nextRefresh = t
	sh.refresh.Set(e)
}

// HeapPlace and HeapKey place an entry in its shard's refresh heap.
func (e *entry) HeapPlace() *int32 { return &e.heapIdx }
func (e *entry) HeapKey() int64    { return e.nextRefresh }

// descText renders entries as the analytics name them.
func descText(es []config.Entry) string { return string(config.AppendDescriptorText(nil, es)) }

// keys identifies each descriptor's counter by a hash of its rule and
// values (the table compares values on lookup: no key string is built),
// a local rule's also by its limiter key. The slots must be zero.
func (c *Checker) keys(bufpp **[]byte, req *ratelimit.Request, rules []*config.Rule, slots []slot) {
	var buf []byte
	if *bufpp != nil {
		buf = (**bufpp)[:0]
	}
	for i, r := range rules {
		s := &slots[i]
		// (field by field: the slots are zero, and writing a whole one costs)
		s.rule, s.sh, s.idx, s.dupOf, s.poolSlot, s.cost = r, -1, i, -1, -1, req.HitsOf(i)
		switch {
		case req.Release:
			s.role = roleRelease
		case r != nil && r.OnExceed == config.ExceedDefer && !req.NoDefer:
			s.role = roleDefer
		}
		if r == nil || r.Unlimited {
			continue
		}
		es := req.Descriptors[i].Entries
		if r.Mode == config.ModeLocal {
			if *bufpp == nil {
				*bufpp = c.keyBufs.Get().(*[]byte)
				buf = (**bufpp)[:0]
			}
			at := len(buf)
			buf = config.AppendCounterKey(buf, r, es)
			buf = c.localKeys.Append(buf[:at], buf[at:])
		}
		// (a blocked or local rule's entry carries its decisions to analytics)
		s.h = c.counterHash(r, es)
		s.sh = int(s.h & c.mask)
		// descriptors naming the same counter are decided together
		for j := range i {
			if p := &slots[j]; p.dupOf < 0 && p.rule == r && config.SameCounter(req.Descriptors[j].Entries, es, r) {
				s.dupOf, s.sh = j, -1
				p.cost += s.cost
				break
			}
		}
	}
	if *bufpp == nil {
		return // no local-mode key
	}
	**bufpp = buf
	at := 0 // every local key is digest.Size long, in the order of its descriptors
	for i, r := range rules {
		if r != nil && !r.Unlimited && r.Mode == config.ModeLocal { // aliases the buffer; the limiter copies what it keeps
			slots[i].key = unsafe.String(&buf[at], digest.Size)
			at += digest.Size
		}
	}
}

// counterHash hashes a counter's rule id and values (a shared wildcard's
// pattern).
func (c *Checker) counterHash(r *config.Rule, es []config.Entry) uint64 {
	h := maphash.String(c.seed, r.ID)
	for i := range es {
		h = (h^maphash.String(c.seed, r.CountedValue(i, es[i].Value)))*0x9e3779b97f4a7c15 + uint64(i)
	}
	return h
}

// create adds a key to sh (requires sh.mu held), evicting first when the
// shard or the table's bytes are full; its tombstone may start it over.
func (c *Checker) create(sh *shard, s *slot, req *ratelimit.Request, now int64) *entry {
	if sh.len() >= c.perShard {
		c.evict(sh, now, false)
	}
	es := s.entriesOf(req)
	vals := make([]string, len(es))
	owned := vals[:0:0]
	for i := range es {
		if i < len(s.rule.Shared) && s.rule.Shared[i] {
			vals[i] = s.rule.Path[i].Value // the rule's
			continue
		}
		vals[i] = strings.Clone(es[i].Value) // a copy: it may alias the caller's buffer
		owned = append(owned, vals[i])
	}
	key := string(config.AppendCounterKey(nil, s.rule, es))
	e := newEntry(s.rule)
	e.key, e.skey, e.vals, e.desc, e.hash, e.rule = key, c.storeKey(key, s.rule), vals, descText(es), s.h, s.rule
	e.heapIdx, e.answerRemaining, e.created, e.usage = -1, -1, now, tally.NewMinute(c.streams.Add(1))
	e.whole = c.ft.horizon[s.h>>52].Load()
	c.adopt(sh, e, now)
	need := entryBytes(e, owned)
	e.bytes = int32(min(need, 1<<31-1))
	c.makeRoom(s.sh, need, now)
	c.bytes.Add(int64(e.bytes))
	if t := sh.tombs.Until(s.h); t > now {
		e.overUntil, e.restored = t, true
	}
	sh.insert(e)
	// a young near_limit: sync key learns from its charges' answers; keys
	// only reads teach (buckets, hot keys) are read soon
	first := int64(c.cfg.MinRefresh)
	if parkable(e) && s.rule.NearLimit == config.NearSync {
		first = min(int64(c.cfg.MaxRefresh), int64(parkAfter))
	}
	sh.schedule(e, now+first)
	c.Stats.Keys.Add(1)
	return e
}

// evict drops the least recently used of a sample of sh's keys (with
// older, not one used at now: the request's own), reporting whether it did.
func (c *Checker) evict(sh *shard, now int64, older bool) bool {
	var victim *entry
	n := 0
	for _, e := range sh.keys {
		for ; e != nil; e = e.next { // (equal hashes chain)
			if victim == nil || e.used < victim.used {
				victim = e
			}
			n++
		}
		if n >= 8 {
			break
		}
	}
	if victim == nil || older && victim.used >= now {
		return false
	}
	c.dropEntry(sh, victim, now)
	return true
}

// dropEntry removes e (requires sh.mu held): its pending consumption
// leaves as orphans, and an over-limit key is remembered by its tombstone.
func (c *Checker) dropEntry(sh *shard, e *entry, now int64) {
	c.evicted(e)
	if e.emit != emitClean {
		c.Stats.EvictedDirty.Add(1)
		c.drain(sh, e)
	}
	if e.overUntil > now {
		if sh.tombs == nil {
			sh.tombs = tombs.New(c.tombKeys())
			c.bytes.Add(heapsize.Of(8 * len(sh.tombs)))
		}
		sh.tombs.Mark(e.hash, e.overUntil)
	}
	sh.remove(e)
	c.bytes.Add(-int64(e.bytes))
	c.Stats.Evictions.Add(1)
	c.Stats.Keys.Add(-1)
}

// storeKey is where this instance's consumption of key goes: a hot key
// (`shards: N`) has one per shard, the instance always the same.
func (c *Checker) storeKey(key string, r *config.Rule) string {
	if r.Shards <= 1 {
		return key
	}
	return counters.ShardKey(key, c.shardOf(r.Shards))
}

func (c *Checker) shardOf(n int64) int64 {
	h := fnv.New64a()
	h.Write([]byte(c.instance))
	return int64(h.Sum64() % uint64(n))
}
