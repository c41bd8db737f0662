package aggregator

import (
	"container/heap"
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
// that the one ending first is closed early) and at most maxRules rule
// labels (past that new rules count under "other"); the rules of
// per-request limit overrides count under "<domain>:override", since
// their ids carry a limit chosen per request. Every operation is
// O(log open windows): windows wait in a heap ordered by their end.
type Accuracy struct {
	mu         sync.Mutex
	open       map[windowID]*windowTally
	ends       endHeap // the open windows, earliest end first
	maxWindows int
	maxRules   int
	overshoot  map[string]uint64 // rule → hits admitted above limits
	under      map[string]uint64 // rule → hits refused below limits
	windows    map[string]uint64 // rule → windows closed
}

type windowID struct {
	key   string
	start int64
}

type windowTally struct {
	id              windowID
	rule            string
	limit           int64
	end             int64
	allowed, denied uint64
	index           int // in ends
}

// lateness is how long after its end a window stays open for late deltas
// (they arrive within the pipeline lag).
const lateness = int64(2 * time.Second)

// OtherRule is the label of rules beyond the bound on rule labels.
const OtherRule = "other"

// NewAccuracy returns a tracker of at most maxWindows open windows and
// 10,000 rule labels.
func NewAccuracy(maxWindows int) *Accuracy {
	return &Accuracy{open: map[windowID]*windowTally{}, maxWindows: max(maxWindows, 1), maxRules: 10_000,
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
	for len(a.ends) > 0 && a.ends[0].end+lateness < now {
		a.close(a.ends[0])
	}
	id := windowID{d.CounterKey, d.WindowStartUnixNanos}
	w := a.open[id]
	if w == nil {
		if len(a.open) >= a.maxWindows {
			a.close(a.ends[0])
		}
		w = &windowTally{id: id, rule: a.label(d), limit: d.Limit, end: d.WindowStartUnixNanos + d.WindowNanos}
		a.open[id] = w
		heap.Push(&a.ends, w)
	}
	w.allowed += d.AllowedCost
	w.denied += d.DeniedCost
}

// label is the rule label of d: an override's id carries a per-request
// limit, so overrides count per domain.
func (a *Accuracy) label(d *eventsv1.Delta) string { return config.RuleLabel(d.RuleId) }

// close books t and forgets it (requires a.mu held).
func (a *Accuracy) close(t *windowTally) {
	heap.Remove(&a.ends, t.index)
	delete(a.open, t.id)
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

// endHeap is a min-heap of open windows by end (container/heap).
type endHeap []*windowTally

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h endHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *endHeap) Push(x any) {
	t := x.(*windowTally)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *endHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
