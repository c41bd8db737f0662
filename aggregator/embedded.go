package aggregator

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/velvetrope/velvetrope/events"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// Applier applies one delta read from a partition, at most once; it
// reports whether the delta was new.
type Applier interface {
	Apply(partition int, d *eventsv1.Delta) bool
}

// Embedded consumes deltas and applies them, committing each record
// after all its deltas were applied. Malformed records are counted and skipped.
type Embedded struct {
	r         *events.Reader
	applier   Applier
	analytics Analytics
	log       *slog.Logger
	cancel    context.CancelFunc
	done      chan struct{}

	// Applied and Duplicates count new and repeated deltas.
	Applied, Duplicates atomic.Uint64
}

// NewEmbedded returns an aggregator of c into a.
func NewEmbedded(c events.Consumer, a Applier, logger *slog.Logger) *Embedded {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Embedded{r: events.NewReader(c, logger), applier: a, log: logger}
}

// WithAnalytics hands every delta to a as well, once applied.
func (e *Embedded) WithAnalytics(a Analytics) *Embedded {
	e.analytics = a
	return e
}

// Start runs the consume loop until Stop.
func (e *Embedded) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		for {
			m, ds, err := e.r.Next(ctx)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, events.ErrClosed) {
					e.log.Error("embedded aggregator stopped", "error", err)
				}
				return
			}
			for _, d := range ds {
				if e.applier.Apply(m.Partition, d) {
					e.Applied.Add(1)
				} else {
					e.Duplicates.Add(1)
				}
			}
			if e.analytics != nil {
				e.analytics.Add(ds)
			}
			if err := e.r.Commit(ctx, m); err != nil && ctx.Err() == nil {
				e.log.Error("commit failed", "partition", m.Partition, "offset", m.Offset, "error", err)
			}
		}
	}()
	return nil
}

// Stop ends the loop and waits for it, or for ctx.
func (e *Embedded) Stop(ctx context.Context) error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Bad returns how many malformed records were skipped.
func (e *Embedded) Bad() uint64 { return e.r.Bad() }
