package aggregator

import (
	"sync"
	"time"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// Accuracy measures how well the fleet kept its limits: per counter and
// window it adds up the hits admitted and refused (from every instance's
// deltas), and when the window is over it books, per rule, the overshoot
// (admitted above the limit) and the under-admission (hits refused while
// the window ended below its limit). Bounded: at most maxWindows open
// windows are tracked; past that the oldest are closed early.
type Accuracy struct {
	mu         sync.Mutex
	open       map[windowID]*windowTally
	maxWindows int
	overshoot  map[string]uint64 // rule → hits admitted above limits
	under      map[string]uint64 // rule → hits refused below limits
	windows    map[string]uint64 // rule → windows closed
	swept      int64             // last sweep for ended windows
}

type windowID struct {
	key   string
	start int64
}

type windowTally struct {
	rule            string
	limit           int64
	end             int64
	allowed, denied uint64
}

// NewAccuracy returns a tracker of at most maxWindows open windows.
func NewAccuracy(maxWindows int) *Accuracy {
	return &Accuracy{open: map[windowID]*windowTally{}, maxWindows: max(maxWindows, 1),
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
	id := windowID{d.CounterKey, d.WindowStartUnixNanos}
	w := a.open[id]
	if w == nil {
		if len(a.open) >= a.maxWindows {
			a.closeOldest()
		}
		w = &windowTally{rule: d.RuleId, limit: d.Limit, end: d.WindowStartUnixNanos + d.WindowNanos}
		a.open[id] = w
	}
	w.allowed += d.AllowedCost
	w.denied += d.DeniedCost
	if now-a.swept < int64(time.Second) {
		return // sweeping every open window on every delta would cost O(windows)
	}
	a.swept = now
	for k, t := range a.open {
		if t.end+int64(2*time.Second) < now { // late deltas arrive within the pipeline lag
			a.close(k, t)
		}
	}
}

func (a *Accuracy) close(id windowID, t *windowTally) {
	delete(a.open, id)
	a.windows[t.rule]++
	if over := int64(t.allowed) - t.limit; over > 0 {
		a.overshoot[t.rule] += uint64(over)
	} else if t.denied > 0 {
		a.under[t.rule] += min(t.denied, uint64(-over))
	}
}

func (a *Accuracy) closeOldest() {
	var oldest windowID
	var ot *windowTally
	for k, t := range a.open {
		if ot == nil || t.end < ot.end {
			oldest, ot = k, t
		}
	}
	if ot != nil {
		a.close(oldest, ot)
	}
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
