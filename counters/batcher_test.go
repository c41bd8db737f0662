package counters

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gateStore answers every operation with its cost as the total, after
// holding each batch until the test lets it go; it records batch sizes
// and how many batches were in flight at once.
type gateStore struct {
	Store
	gate              chan struct{}
	mu                sync.Mutex
	sizes             []int
	inFlight, maxSeen atomic.Int32
}

func (g *gateStore) Do(_ context.Context, ops []*Op) {
	n := g.inFlight.Add(1)
	for {
		m := g.maxSeen.Load()
		if n <= m || g.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	<-g.gate
	g.mu.Lock()
	g.sizes = append(g.sizes, len(ops))
	g.mu.Unlock()
	for _, op := range ops {
		op.Answer = ChargeResult{Allowed: true, Total: op.Charge.Cost}
	}
	g.inFlight.Add(-1)
}

// TestBatcherGroupsWaitingCalls: 200 concurrent calls through 2 lanes
// make at most 2 batches in flight, far fewer batches than calls, and
// every call gets its own answer exactly once.
func TestBatcherGroupsWaitingCalls(t *testing.T) {
	g := &gateStore{gate: make(chan struct{})}
	b := NewBatcher(g, 2)
	const calls = 200
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := NewCall()
			w.Charge.Cost = int64(i + 1)
			b.Do(w, time.Minute)
			if w.Err != nil || w.Answer.Total != int64(i+1) {
				errs <- errors.New("wrong answer")
			}
		}()
	}
	for { // two leaders wait at the gate, every other call in the queue
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == calls-2 {
			break
		}
		time.Sleep(time.Millisecond) // waiting for the goroutines to queue
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case g.gate <- struct{}{}:
			continue
		case <-done:
		}
		break
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, n := range g.sizes {
		total += n
		if n > maxBatch {
			t.Fatalf("a batch of %d operations (bound %d)", n, maxBatch)
		}
	}
	if total != calls || g.maxSeen.Load() > 2 || len(g.sizes) >= calls/2 {
		t.Fatalf("%d operations in %d batches (sizes %v), %d in flight at most; want %d in few batches, at most 2 at once",
			total, len(g.sizes), g.sizes, g.maxSeen.Load(), calls)
	}
	if b.running != 0 || len(b.queue) != 0 {
		t.Fatalf("left %d lanes running, %d queued", b.running, len(b.queue))
	}
}

// TestBatcherDeadline: an operation that waited for a lane past its
// timeout is not sent and fails as unavailable (the failure policy then
// decides it).
func TestBatcherDeadline(t *testing.T) {
	g := &gateStore{gate: make(chan struct{})}
	b := NewBatcher(g, 1)
	var clock atomic.Int64 // ns after t
	t0 := time.Unix(1_700_000_000, 0)
	b.now = func() time.Time { return t0.Add(time.Duration(clock.Load())) }
	first := NewCall()
	go b.Do(first, time.Minute) // holds the only lane
	for g.inFlight.Load() == 0 {
		time.Sleep(time.Millisecond) // waiting for the lane's holder to reach the store
	}
	late := NewCall()
	done := make(chan struct{})
	go func() { b.Do(late, time.Millisecond); close(done) }()
	for {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == 1 {
			break
		}
		time.Sleep(time.Millisecond) // waiting for the late call to queue
	}
	clock.Add(int64(5 * time.Millisecond)) // past the late call's 1 ms timeout
	g.gate <- struct{}{}                   // the first batch answers; the late call leads the next
	<-done
	if !errors.Is(late.Err, ErrStoreUnavailable) || len(g.sizes) != 1 {
		t.Fatalf("late call: %v, batches %v (want only the first)", late.Err, g.sizes)
	}
}
