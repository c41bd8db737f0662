package aggregator

import (
	"container/heap"
	"hash/maphash"
	"sync"
	"time"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// Accuracy measures how well the fleet kept its limits: per counter and
// window it adds up the hits admitted and refused (from every instance's
// deltas), and when the window is over it books, per rule, the overshoot
// (admitted above the limit) and the under-admission (hits refused while
// the window ended below its limit).
//
// Bounded whatever the deltas say: at most maxWindows open windows (past
// that one of those ending first is closed early) and at most maxRules
// rule labels (past that new rules count under "other"); the rules of
// per-request limit overrides count under "<domain>:override", since
// their ids carry a limit chosen per request. A window is known by a
// 64-bit hash of its counter key and start (two windows of one hash would
// add up in one tally: a measurement off, never a decision). Windows wait
// in lists per end time, and the end times in a heap: windows end on
// their unit's boundaries, so there are few end times however many
// windows, and opening or closing one is O(1) but for a new end time.
// At a per-IP front every delta opens a window and closes one (at
// 1,000,000 keys a tracker of pointers in a heap was a third of the
// aggregator's CPU).
type Accuracy struct {
	mu         sync.Mutex
	seed       maphash.Seed
	open       map[uint64]int32 // window hash → its tally in slab
	slab       []windowTally
	free       int32           // first free tally in slab (-1: none)
	byEnd      map[int64]int32 // end → first tally of the windows ending then
	ends       endHeap         // the end times of byEnd, earliest first
	maxWindows int
	maxRules   int
	overshoot  map[string]uint64 // rule → hits admitted above limits
	under      map[string]uint64 // rule → hits refused below limits
	windows    map[string]uint64 // rule → windows closed
}

type windowTally struct {
	hash            uint64
	rule            string
	limit           int64
	end             int64
	allowed, denied uint64
	next            int32 // the next tally of the same end (or free), -1: none
}

// lateness is how long after its end a window stays open for late deltas
// (they arrive within the pipeline lag).
const lateness = int64(2 * time.Second)

// OtherRule is the label of rules beyond the bound on rule labels.
const OtherRule = "other"

// NewAccuracy returns a tracker of at most maxWindows open windows and
// 10,000 rule labels.
func NewAccuracy(maxWindows int) *Accuracy {
	return &Accuracy{seed: maphash.MakeSeed(), open: map[uint64]int32{}, free: -1, byEnd: map[int64]int32{},
		maxWindows: max(maxWindows, 1), maxRules: 10_000,
		overshoot: map[string]uint64{}, under: map[string]uint64{}, windows: map[string]uint64{}}
}

// Observe adds a delta (window algorithms only; a bucket has no window to
// judge) and closes the windows that ended before now.
func (a *Accuracy) Observe(d *eventsv1.Delta, now int64) {
	if d.WindowStartUnixNanos == 0 || d.Limit <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.ends) > 0 && a.ends[0]+lateness < now {
		a.closeEnd()
	}
	h := maphash.String(a.seed, d.CounterKey) ^ uint64(d.WindowStartUnixNanos)*0x9e3779b97f4a7c15
	i, ok := a.open[h]
	if !ok {
		if len(a.open) >= a.maxWindows {
			a.closeOne()
		}
		end := d.WindowStartUnixNanos + d.WindowNanos
		i = a.alloc()
		head, known := a.byEnd[end]
		if !known {
			head = -1
			heap.Push(&a.ends, end)
		}
		a.slab[i] = windowTally{hash: h, rule: a.label(d), limit: d.Limit, end: end, next: head}
		a.byEnd[end] = i
		a.open[h] = i
	}
	w := &a.slab[i]
	w.allowed += d.AllowedCost
	w.denied += d.DeniedCost
}

// alloc returns a free tally's index (requires a.mu held).
func (a *Accuracy) alloc() int32 {
	if a.free >= 0 {
		i := a.free
		a.free = a.slab[i].next
		return i
	}
	a.slab = append(a.slab, windowTally{})
	return int32(len(a.slab) - 1)
}

// closeEnd closes every window of the earliest end (requires a.mu held).
func (a *Accuracy) closeEnd() {
	end := heap.Pop(&a.ends).(int64)
	for i := a.byEnd[end]; i >= 0; {
		next := a.slab[i].next
		a.close(i)
		i = next
	}
	delete(a.byEnd, end)
}

// closeOne closes one window of the earliest end (requires a.mu held and
// a window open).
func (a *Accuracy) closeOne() {
	end := a.ends[0]
	i := a.byEnd[end]
	if next := a.slab[i].next; next >= 0 {
		a.byEnd[end] = next
	} else {
		heap.Pop(&a.ends)
		delete(a.byEnd, end)
	}
	a.close(i)
}

// label is the rule label of d: an override's id carries a per-request
// limit, so overrides count per domain.
func (a *Accuracy) label(d *eventsv1.Delta) string { return config.RuleLabel(d.RuleId) }

// close books tally i and frees it (requires a.mu held; i is out of its
// end's list already or about to be).
func (a *Accuracy) close(i int32) {
	t := &a.slab[i]
	delete(a.open, t.hash)
	rule := t.rule
	if _, known := a.windows[rule]; !known && len(a.windows) >= a.maxRules {
		rule = OtherRule
	}
	a.windows[rule]++
	if over := int64(t.allowed) - t.limit; over > 0 {
		a.overshoot[rule] += uint64(over)
	} else if t.denied > 0 {
		a.under[rule] += min(t.denied, uint64(-over))
	}
	*t = windowTally{next: a.free}
	a.free = i
}

// Open returns how many windows are being tracked.
func (a *Accuracy) Open() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.open)
}

// Report returns, per rule, the overshoot, the under-admission and the
// windows closed so far.
func (a *Accuracy) Report() (overshoot, under, windows map[string]float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	conv := func(m map[string]uint64) map[string]float64 {
		out := make(map[string]float64, len(m))
		for k, v := range m {
			out[k] = float64(v)
		}
		return out
	}
	return conv(a.overshoot), conv(a.under), conv(a.windows)
}

// endHeap is a min-heap of end times (container/heap).
type endHeap []int64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *endHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
