package counters

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Call is one operation a Batcher sends: the operation, and how its
// caller is told the answer is in. A Call is reused (Reset) across
// operations, as its channel is made once.
type Call struct {
	Op
	signal   chan uint8
	deadline time.Time
}

// NewCall returns a Call ready for Batcher.Do.
func NewCall() *Call { return &Call{signal: make(chan uint8, 1)} }

// Reset readies c for another operation.
func (c *Call) Reset() { *c = Call{signal: c.signal} }

// Batcher sends the store calls of concurrent decisions together (group
// commit): a decision that needs the store hands over its operation; at
// most lanes batches are in flight, each one round trip carrying every
// operation that was waiting when it left. An idle store sees each call
// at once; a busy one sees one round trip for many decisions, so a front
// whose keys are mostly new to this checker (per-IP, per-user limits)
// does not pay a round trip per request. Each operation stays one atomic
// script, so batching changes no decision.
//
// No goroutine of its own: the first caller to find a free lane leads a
// batch (its own operation and whatever waits), and hands the lane to the
// oldest waiting caller when it is done.
type Batcher struct {
	store Store
	lanes int
	now   func() time.Time // real time: deadlines are a context's

	mu      sync.Mutex
	queue   []*Call   // waiting for a lane, oldest first
	running int       // lanes in use
	bufs    sync.Pool // *batchBuf
}

// maxBatch bounds one round trip (a pipeline of scripts).
const maxBatch = 128

// A waiting operation is told one of two things.
const (
	finished uint8 = iota + 1 // another caller's batch ran it
	lead                      // a lane is free: run a batch with it
)

type batchBuf struct {
	works [maxBatch]*Call
	ops   [maxBatch]*Op
}

// NewBatcher returns a Batcher over store with lanes batches in flight
// at most.
func NewBatcher(store Store, lanes int) *Batcher {
	b := &Batcher{store: store, lanes: max(lanes, 1), now: time.Now}
	b.bufs.New = func() any { return new(batchBuf) }
	return b
}

// Do runs w's operation (w.Op) in a batch within timeout, and returns
// when w.Op has its answer or Err (an operation that waited for a lane
// past its timeout is not sent: ErrStoreUnavailable).
func (b *Batcher) Do(w *Call, timeout time.Duration) {
	w.deadline = b.now().Add(timeout)
	b.mu.Lock()
	if b.running >= b.lanes {
		b.queue = append(b.queue, w)
		b.mu.Unlock()
		if <-w.signal == finished {
			return
		}
		b.mu.Lock() // handed a lane: the caller that freed it kept it counted
	} else {
		b.running++
	}
	buf := b.bufs.Get().(*batchBuf)
	batch := append(buf.works[:0], w)
	n := min(len(b.queue), maxBatch-1)
	batch = append(batch, b.queue[:n]...)
	copy(b.queue, b.queue[n:])
	clear(b.queue[len(b.queue)-n:])
	b.queue = b.queue[:len(b.queue)-n]
	b.mu.Unlock()

	b.run(batch, buf.ops[:0])
	for _, x := range batch[1:] {
		x.signal <- finished
	}
	clear(buf.works[:len(batch)])
	clear(buf.ops[:len(batch)])
	b.bufs.Put(buf)

	b.mu.Lock()
	if len(b.queue) > 0 {
		next := b.queue[0]
		copy(b.queue, b.queue[1:])
		b.queue[len(b.queue)-1] = nil
		b.queue = b.queue[:len(b.queue)-1]
		next.signal <- lead
	} else {
		b.running--
	}
	b.mu.Unlock()
}

// run sends one batch, within the earliest deadline of its operations;
// an operation whose deadline passed while it waited is not sent.
func (b *Batcher) run(batch []*Call, ops []*Op) {
	now := b.now()
	deadline := batch[0].deadline
	for _, w := range batch {
		if !w.deadline.After(now) {
			w.Err = errWaitedTooLong
			continue
		}
		if w.deadline.Before(deadline) {
			deadline = w.deadline
		}
		ops = append(ops, &w.Op)
	}
	if len(ops) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	b.store.Do(ctx, ops)
	cancel()
}

// errWaitedTooLong is an operation that spent its whole store timeout
// waiting for a lane.
var errWaitedTooLong = fmt.Errorf("%w: waited for the store past store_timeout", ErrStoreUnavailable)
