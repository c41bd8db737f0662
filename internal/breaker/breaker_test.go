package breaker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBreaker walks the breaker through its states with explicit times.
func TestBreaker(t *testing.T) {
	b := New(3, time.Second)
	fail := errors.New("timeout")
	const s = int64(time.Second)
	steps := []struct {
		name      string
		at        int64
		err       error // outcome reported when the call is let through
		wantOK    bool
		wantProbe bool
		state     State
	}{
		{"a success", 0, nil, true, false, Closed},
		{"failure 1", 1, fail, true, false, Closed},
		{"failure 2", 2, fail, true, false, Closed},
		{"a success resets the count", 3, nil, true, false, Closed},
		{"failure 1 again", 4, fail, true, false, Closed},
		{"failure 2 again", 5, fail, true, false, Closed},
		{"failure 3 opens", 6, fail, true, false, Open},
		{"open: refused without a call", 7, nil, false, false, Open},
		{"still open just before the end", 6 + s - 1, nil, false, false, Open},
		{"half-open: one probe, which fails", 6 + s, fail, true, true, Open},
		{"open again for a second", 6 + s + 1, nil, false, false, Open},
		{"the next probe succeeds and closes", 6 + 2*s, nil, true, true, Closed},
		{"closed: calls go out", 6 + 2*s + 1, nil, true, false, Closed},
		{"a canceled caller is not a store failure", 6 + 2*s + 2, context.Canceled, true, false, Closed},
	}
	for i, st := range steps {
		ok, probe := b.Allow(st.at)
		if ok != st.wantOK || probe != st.wantProbe {
			t.Fatalf("step %d (%s): allow = %v, %v; want %v, %v", i, st.name, ok, probe, st.wantOK, st.wantProbe)
		}
		if ok {
			b.Done(st.at, st.err, probe)
		}
		if got := b.State(st.at); got != st.state {
			t.Fatalf("step %d (%s): state %v, want %v", i, st.name, got, st.state)
		}
	}
	if b.Opens.Load() != 1 || b.Rejected.Load() != 3 {
		t.Fatalf("opens %d (want 1), rejected %d (want 3)", b.Opens.Load(), b.Rejected.Load())
	}
	// while one probe is out, every other call is refused
	b2 := New(1, 10)
	b2.Allow(0)
	b2.Done(0, fail, false)
	if ok, probe := b2.Allow(10); !ok || !probe {
		t.Fatal("no probe after open_for")
	}
	if ok, _ := b2.Allow(11); ok {
		t.Fatal("a second call went out while the probe was in flight")
	}
	if b2.State(11) != HalfOpen {
		t.Fatalf("state while probing: %v", b2.State(11))
	}
}
