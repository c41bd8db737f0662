package sink

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// WriterConfig tunes a Writer. Zero values take the defaults shown.
type WriterConfig struct {
	FlushInterval time.Duration // how often rows are written (2 s; at most 5 s keeps analytics near-live)
	MaxRows       int           // rows buffered at most; past it the oldest minutes are dropped (1,000,000)
	MinBackoff    time.Duration // first wait after a failed write (500 ms, doubling)
	MaxBackoff    time.Duration // longest wait between attempts (30 s)
	WriteTimeout  time.Duration // one attempt (10 s)
	Logger        *slog.Logger
}

// WriterStats are the writer's counters, for metrics.
type WriterStats struct {
	Rows        atomic.Int64  // rows buffered now
	Written     atomic.Uint64 // rows written
	Dropped     atomic.Uint64 // rows dropped over MaxRows (analytics lost; counters unaffected)
	WriteErrors atomic.Uint64 // failed writes (retried)
	Skipped     atomic.Uint64 // deltas without minute usage (older checkers)
	LastWrite   atomic.Int64  // unix ns of the last successful write
}

// Writer buffers rows between the aggregator and a Store: Add never
// blocks on the store; a loop writes the buffer every FlushInterval.
type Writer struct {
	cfg   WriterConfig
	store Store

	mu  sync.Mutex
	buf map[rowKey]Row

	stop chan struct{}
	done chan struct{}
	logs atomic.Int64 // unix ns of the last logged failure (one line per 10 s)

	Stats WriterStats
}

// NewWriter returns a writer into store; Start runs its loop.
func NewWriter(cfg WriterConfig, store Store) (*Writer, error) {
	if store == nil {
		return nil, errors.New("sink: a store is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.FlushInterval, 2*time.Second)
	def(&cfg.MinBackoff, 500*time.Millisecond)
	def(&cfg.MaxBackoff, 30*time.Second)
	def(&cfg.WriteTimeout, 10*time.Second)
	if cfg.MaxRows <= 0 {
		cfg.MaxRows = 1_000_000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Writer{cfg: cfg, store: store, buf: map[rowKey]Row{}}, nil
}

// Add buffers the rows that deltas carry (the newest version of each row
// is kept). It never waits on the store.
func (w *Writer) Add(deltas []*eventsv1.Delta) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range deltas {
		r, ok := RowOf(d)
		if !ok {
			w.Stats.Skipped.Add(1)
			continue
		}
		w.put(r)
	}
	w.bound()
}

// put keeps r unless the buffer holds a newer version (requires w.mu).
func (w *Writer) put(r Row) {
	k := r.key()
	if old, ok := w.buf[k]; !ok || r.Version > old.Version {
		w.buf[k] = r
	}
}

// bound drops the oldest minutes' rows past MaxRows, down to 90 % of it
// so that a long outage sorts the buffer once per tenth of the bound, not
// on every Add (requires w.mu).
func (w *Writer) bound() {
	defer func() { w.Stats.Rows.Store(int64(len(w.buf))) }()
	if len(w.buf) <= w.cfg.MaxRows {
		return
	}
	over := len(w.buf) - w.cfg.MaxRows*9/10
	minutes := make([]int64, 0, len(w.buf))
	for k := range w.buf {
		minutes = append(minutes, k.minute)
	}
	slices.Sort(minutes)
	cut := minutes[over-1] // drop everything up to the minute of the over-th oldest row
	dropped := 0
	for k := range w.buf {
		if k.minute <= cut {
			delete(w.buf, k)
			dropped++
		}
	}
	w.Stats.Dropped.Add(uint64(dropped))
	w.cfg.Logger.Warn("analytics buffer full: dropped the oldest rows (counters are not affected)",
		"rows", dropped, "through_minute", time.Unix(cut, 0).UTC(), "max_rows", w.cfg.MaxRows)
}

// Start runs the flush loop.
func (w *Writer) Start(context.Context) error {
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go w.loop()
	return nil
}

func (w *Writer) loop() {
	defer close(w.done)
	wait := w.cfg.FlushInterval
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(wait):
		}
		if err := w.Flush(context.Background()); err != nil {
			wait = min(max(2*wait, w.cfg.MinBackoff), w.cfg.MaxBackoff)
			if now := time.Now().UnixNano(); now-w.logs.Load() > int64(10*time.Second) {
				w.logs.Store(now)
				w.cfg.Logger.Warn("writing analytics failed; rows stay buffered and are retried",
					"error", err, "rows", w.Stats.Rows.Load(), "retry_in", wait)
			}
			continue
		}
		wait = w.cfg.FlushInterval
	}
}

// Flush writes the buffer now. On failure the rows go back to the buffer
// (behind any newer version that arrived meanwhile).
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	if len(w.buf) == 0 {
		w.mu.Unlock()
		return nil
	}
	rows := make([]Row, 0, len(w.buf))
	for _, r := range w.buf {
		rows = append(rows, r)
	}
	w.buf = make(map[rowKey]Row, len(rows))
	w.Stats.Rows.Store(0)
	w.mu.Unlock()

	// Minute order: a partial write, if the store had one, keeps the
	// newest minutes for the retry.
	slices.SortFunc(rows, func(a, b Row) int { return cmp.Compare(a.Minute, b.Minute) })
	wctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
	err := w.store.Insert(wctx, rows)
	cancel()
	if err == nil {
		w.Stats.Written.Add(uint64(len(rows)))
		w.Stats.LastWrite.Store(time.Now().UnixNano())
		return nil
	}
	w.Stats.WriteErrors.Add(1)
	w.mu.Lock()
	for _, r := range rows {
		w.put(r)
	}
	w.bound()
	w.mu.Unlock()
	return err
}

// Stop ends the loop and makes a last write within ctx (up to three
// attempts). Rows it cannot write are lost with the process: they are
// counted in Stats.Dropped and logged, and Stop still returns nil, so a
// ClickHouse outage never holds up a shutdown (the counters in Redis are
// exact regardless).
func (w *Writer) Stop(ctx context.Context) error {
	if w.stop != nil {
		close(w.stop)
		<-w.done
		w.stop = nil
	}
	var err error
	for range 3 {
		if err = w.Flush(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.cfg.MinBackoff):
			continue
		}
		break
	}
	w.mu.Lock()
	lost := len(w.buf)
	w.buf = map[rowKey]Row{}
	w.Stats.Rows.Store(0)
	w.mu.Unlock()
	w.Stats.Dropped.Add(uint64(lost))
	w.cfg.Logger.Warn("analytics rows not written at shutdown: lost (counters are not affected)", "rows", lost, "error", err)
	return nil
}
