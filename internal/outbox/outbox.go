// Package outbox hands deltas to a producer in the order they were made,
// numbered once: what the producer refuses stays, in order, ahead of the
// deltas made after it, and goes with the next Send. Nothing handed to an
// outbox is dropped; a caller bounds what it holds by not sending more
// while it is Full (the checker keeps aggregating in its key table).
package outbox

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/events"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/hist"
)

// Outbox is one producer's queue of deltas. Its methods are not safe for
// concurrent use (the checker calls them under its flush lock); the
// counters are atomic.
type Outbox struct {
	prod  events.Producer
	max   int
	batch int
	held  []*eventsv1.Delta // refused, oldest first
	seq   uint64
	// Emitted counts the deltas the producer accepted, Errors the sends it
	// refused; Latency is from a delta's first pending decision
	// (FirstUnixNanos) to the producer accepting it.
	Emitted, Errors atomic.Uint64
	Latency         hist.Histogram
}

// New returns an outbox that is full at limit held deltas and hands prod
// at most batch deltas per call.
func New(prod events.Producer, limit, batch int) *Outbox {
	return &Outbox{prod: prod, max: limit, batch: max(batch, 1)}
}

// Full says max deltas are held: the caller should send no new ones.
func (o *Outbox) Full() bool { return len(o.held) >= o.max }

// Held is how many refused deltas wait for the next Send.
func (o *Outbox) Held() int { return len(o.held) }

// Send gives fresh their sequence numbers, in order (per partition they
// only grow: the aggregator drops what is not above the highest it
// applied), and hands the held deltas, then fresh, to the producer; what
// it refuses is held. The outbox keeps fresh: the caller must not reuse
// it. now reads the clock for Latency.
func (o *Outbox) Send(ctx context.Context, fresh []*eventsv1.Delta, now func() int64) error {
	for _, d := range fresh {
		o.seq++
		d.Sequence = o.seq
	}
	all := fresh
	if len(o.held) > 0 {
		all = append(o.held, fresh...)
	}
	for len(all) > 0 {
		n := min(len(all), o.batch)
		if err := o.prod.Produce(ctx, all[:n]); err != nil {
			o.Errors.Add(1)
			o.held = all
			return err
		}
		o.Emitted.Add(uint64(n))
		t := now()
		for _, d := range all[:n] {
			if d.FirstUnixNanos > 0 {
				o.Latency.Observe(time.Duration(t - d.FirstUnixNanos))
			}
		}
		all = all[n:]
	}
	o.held = nil
	return nil
}
