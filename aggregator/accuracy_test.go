package aggregator

import (
	"testing"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

func TestAccuracy(t *testing.T) {
	a := NewAccuracy(100)
	d := func(key string, start int64, allowed, denied uint64) *eventsv1.Delta {
		return &eventsv1.Delta{RuleId: "api:k", CounterKey: key, WindowStartUnixNanos: start, WindowNanos: 1e9,
			Limit: 10, AllowedCost: allowed, DeniedCost: denied}
	}
	a.Observe(d("a", w0, 8, 0), w0)
	a.Observe(d("a", w0, 4, 3), w0)  // 12 admitted: 2 over
	a.Observe(d("b", w0, 6, 5), w0)  // 6 admitted, 5 refused: 4 under
	a.Observe(d("c", w0, 10, 9), w0) // exact
	over, under, windows := a.Report()
	if len(over)+len(under)+len(windows) != 0 {
		t.Fatal("windows closed before they ended")
	}
	a.Observe(d("a", w0+60e9, 1, 0), w0+60e9) // a minute later: the first windows close
	over, under, windows = a.Report()
	if over["api:k"] != 2 || under["api:k"] != 4 || windows["api:k"] != 3 {
		t.Fatalf("over %v under %v windows %v", over, under, windows)
	}
	small := NewAccuracy(1)
	small.Observe(d("a", w0, 11, 0), w0)
	small.Observe(d("b", w0, 1, 0), w0) // bound reached: a closes early
	if over, _, _ := small.Report(); over["api:k"] != 1 {
		t.Fatalf("bounded: %v", over)
	}
}
