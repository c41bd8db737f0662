package checker

import (
	"container/heap"
	"strings"
	"sync"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/limiter"
)

// entry is the async state of one counter key. Every field is guarded by
// its shard's mutex.
type entry struct {
	key string // counter key: rule id and request values
	// skey is the key in the store: key, or key#shard for a hot key spread
	// over shards (`shards: N`), where this instance's consumption goes.
	skey    string
	vals    []string // the request values (patterns where shared), compared on lookup
	next    *entry   // the next entry with the same hash
	desc    string   // descriptor text, for analytics
	hash    uint64
	created int64 // when this checker started tracking the key
	rule    *config.Rule
	kind    counters.Kind

	windowCounter // KindWindow
	bucketCounter // KindTAT

	answered bool // the store has answered for this key at least once
	restored bool // created again after an eviction while over its limit
	answers  int  // store answers that taught a rate (0, 1, 2+)
	// answerRemaining is what remained at the last store answer (-1: none
	// yet) and sinceAnswer this instance's consumption since: while the
	// store is down, local_budget admits up to answerRemaining / instances.
	answerRemaining, sinceAnswer int64
	lastAnswer                   int64 // when
	lastOthers                   int64 // others' consumption at the last answer (for the rate)
	lastOwn                      int64 // own consumption at the last answer (for the rate)
	othersRate                   int64 // others' hits per second, learned from answers
	// live is this instance's own rate measured as it decides (hits per
	// second over the last rateSpan), so a key that speeds up (as it does when
	// it leaves the near band, where every decision waited on the store)
	// widens its band at once, before any store answer.
	live, liveFrom, liveHits int64
	recheck                  bool  // a live window ended: re-plan the refresh
	ownRate                  int64 // own hits per second
	instances                int
	overUntil                int64 // deny from memory until then
	// room is what a store answer left, trusted until roomUntil: a cost
	// above it is refused from memory.
	room, roomUntil int64
	used            int64 // last decision
	nextRefresh     int64
	heapIdx         int // index in the shard's refresh heap; -1 when not in it

	pend, pendOld, pendApplied pending
	usage                      minuteUsage // this minute's usage so far, carried by every delta
	dirty                      bool
	gone                       bool // evicted: flusher and refresher skip it
}

// answer is what the store said of one counter, from a refresh read or a
// charge's reply, in the form both counters absorb.
type answer struct {
	found                bool
	total, own, base     int64 // window: its counts; bucket: total is the TAT
	cum                  int64 // bucket: cumulative hits applied
	ownMem, ownSync, gen int64
	instances            int
}

func readAnswer(it *counters.ReadItem) answer {
	return answer{found: it.Found, total: it.Total, own: it.Own, base: it.Base, cum: it.Cum,
		ownMem: it.OwnMem, ownSync: it.OwnSync, gen: it.Gen, instances: it.Instances}
}

func chargeAnswer(res *counters.ChargeResult) answer {
	return answer{found: true, total: res.Total, own: res.Own, base: res.Base, cum: res.Cum,
		ownMem: res.OwnMem, ownSync: res.OwnSync, gen: res.Gen, instances: res.Instances}
}

// windowCounter is a window-kind key's state: the current and previous
// window.
type windowCounter struct {
	cur, prev winState
}

// absorb takes in a store answer for the current window. fresh says the
// key was created since the store last answered: the store then knows
// parts of this instance's consumption the entry has forgotten, less
// chargedNow, the hits of the charge that produced the answer, which the
// caller counts itself.
func (w *windowCounter) absorb(a answer, fresh bool, chargedNow int64) {
	if fresh {
		w.cur.emitted = max(w.cur.emitted, a.ownMem)
		w.cur.charged = max(w.cur.charged, a.ownSync-chargedNow)
	}
	w.cur.total, w.cur.own, w.cur.base, w.cur.known = a.total, a.own, a.base, true
}

// bucketCounter is a bucket-kind key's state: this instance's exact view
// of the bucket (a GCRA state that its own admissions advance and store
// answers raise), its cumulative counted hits, and the store's cumulative
// totals at the last answer.
type bucketCounter struct {
	gs          limiter.State
	cum         int64 // hits decided in memory, cumulative
	cumCharged  int64 // hits the store charged, cumulative
	storeOwnCum int64
	storeCum    int64
	gen         int64 // the bucket's resets, as the store last said
}

// rebase takes in this instance's parts the store knows when the key was
// created again (as windowCounter.absorb does for a fresh key).
func (b *bucketCounter) rebase(a answer, chargedNow int64) {
	b.cum = max(b.cum, a.ownMem)
	b.cumCharged = max(b.cumCharged, a.ownSync-chargedNow)
}

// absorb takes in the store's bucket: an operator reset forgets this
// instance's view, and the view is raised to the store's TAT plus what
// this instance counted that the store has not applied yet.
func (b *bucketCounter) absorb(a answer, g limiter.GCRA, window, limit int64) {
	if !a.found {
		return
	}
	if a.gen != b.gen {
		b.gs, b.gen = limiter.State{}, a.gen
	}
	b.storeCum, b.storeOwnCum = a.cum, a.own
	g.Raise(&b.gs, a.total+counters.Span(max(0, b.cum-a.ownMem), window, limit))
}

// others is the other instances' applied consumption; mine everything
// this instance counted.
func (b *bucketCounter) others() int64 { return max(0, b.storeCum-b.storeOwnCum) }
func (b *bucketCounter) mine() int64   { return b.cum + b.cumCharged }

// winState is one window of a window-kind key.
type winState struct {
	start   int64 // window start, unix ns; 0 = none
	emitted int64 // this instance's hits decided in memory in the window (exact)
	charged int64 // this instance's hits the store charged in the window
	total   int64 // the store's applied total at the last answer (this instance's shard)
	own     int64 // the part of total that is this instance's
	shards  int64 // the other shards' totals at the last read (`shards: N`)
	// base is this instance's part (emitted + charged) when an operator
	// last reset the counter: counted, but no longer used.
	base  int64
	known bool // the store answered for this window
}

// others is the applied consumption of other instances in w.
func (w *winState) others() int64 { return max(0, w.total-w.own) + w.shards }

// mine is everything this instance counted in w.
func (w *winState) mine() int64 { return w.emitted + w.charged - w.base }

// pending is consumption counted but not yet flushed, for one window.
type pending struct {
	window                          int64
	allowedCount, allowedCost       uint64
	deniedCount, deniedCost         uint64
	shadowDenied, deferred, counted uint64
	first, last                     int64
	used                            bool
}

func (p *pending) add(now int64) {
	if !p.used {
		p.used, p.first = true, now
	}
	p.last = max(p.last, now)
}

// tally adds one decision of cost hits to p.
func (p *pending) tally(now, cost int64, allowed bool) {
	p.add(now)
	if allowed {
		p.allowedCount++
		p.allowedCost += uint64(cost)
	} else {
		p.deniedCount++
		p.deniedCost += uint64(cost)
	}
}

// minuteUsage is an entry's usage in its current analytics minute.
type minuteUsage struct {
	stream                    uint64 // unique per entry of this checker
	minute                    int64  // unix seconds; 0: none yet
	allowedCount, allowedCost uint64
	deniedCount, deniedCost   uint64
	deferred, shadowDenied    uint64
}

// add folds p into the usage of its minute (never going back to an
// earlier one) and returns the cumulative row a delta carries.
func (u *minuteUsage) add(p *pending) *eventsv1.MinuteUsage {
	t := p.first
	if t == 0 {
		t = p.last
	}
	m := max(t/1e9/60*60, u.minute)
	if m != u.minute {
		*u = minuteUsage{stream: u.stream, minute: m}
	}
	u.allowedCount += p.allowedCount
	u.allowedCost += p.allowedCost
	u.deniedCount += p.deniedCount
	u.deniedCost += p.deniedCost
	u.deferred += p.deferred
	u.shadowDenied += p.shadowDenied
	return &eventsv1.MinuteUsage{MinuteUnix: u.minute, Stream: u.stream, AllowedCount: u.allowedCount,
		AllowedCost: u.allowedCost, DeniedCount: u.deniedCount, DeniedCost: u.deniedCost,
		DeferredCount: u.deferred, ShadowDeniedCount: u.shadowDenied}
}

// shard is one lock domain of the key table.
type shard struct {
	mu      sync.Mutex
	keys    map[uint64]*entry // by counter hash; equal hashes chain through entry.next
	n       int
	dirty   []*entry          // entries with pending consumption
	orphans []*eventsv1.Delta // pending consumption of evicted dirty entries
	refresh refreshHeap
	tombs   []int64 // "over until" by hash slot; allocated on first eviction
	stats   shardStats
	_       [40]byte
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

// matches reports whether e is the counter of rule r for values es. Rules
// are compared by id: a reloaded rule set keeps its counters.
func (e *entry) matches(r *config.Rule, es []config.Entry) bool {
	if e.rule != r && e.rule.ID != r.ID || len(e.vals) != len(es) {
		return false
	}
	for i := range es {
		v := es[i].Value
		if i < len(r.Shared) && r.Shared[i] {
			v = r.Path[i].Value
		}
		if e.vals[i] != v {
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
		heap.Remove(&sh.refresh, e.heapIdx)
	}
	e.gone = true
}

// markDirty queues e for the flusher (requires sh.mu held); it reports
// whether e was clean.
func (sh *shard) markDirty(e *entry) bool {
	if e.dirty {
		return false
	}
	e.dirty = true
	sh.dirty = append(sh.dirty, e)
	return true
}

// schedule (re)places e in the refresh heap at t (requires sh.mu held).
func (sh *shard) schedule(e *entry, t int64) {
	e.nextRefresh = t
	if e.heapIdx >= 0 {
		heap.Fix(&sh.refresh, e.heapIdx)
	} else {
		heap.Push(&sh.refresh, e)
	}
}

// refreshHeap orders entries by next refresh time.
type refreshHeap []*entry

func (h refreshHeap) Len() int           { return len(h) }
func (h refreshHeap) Less(i, j int) bool { return h[i].nextRefresh < h[j].nextRefresh }
func (h refreshHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *refreshHeap) Push(x any) {
	e := x.(*entry)
	e.heapIdx = len(*h)
	*h = append(*h, e)
}
func (h *refreshHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.heapIdx = -1
	return e
}

// tombSlots picks two slots of a tombstone table of n (a power of two).
func tombSlots(h uint64, n int) (int, int) {
	m := uint64(n - 1)
	return int((h >> 17) & m), int((h >> 41) & m)
}

// descText renders entries as "key=value,key=value".
func descText(es []config.Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Key)
		b.WriteByte('=')
		b.WriteString(e.Value)
	}
	return b.String()
}
