package rulesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/plantable"
	"github.com/velvetrope/velvetrope/rulestore"
)

// Clients keeps a checker's client tables on the rules store's: every
// table the live rules name is scanned once into a plantable.Table, then
// followed through the table's log (a blocking read, so a change is
// applied as soon as it is written); a follower the log left behind scans
// again, and the table it had stays live until the new one is complete.
// A table no rule names any more is dropped.
type Clients struct {
	store  *rulestore.Store
	rules  *config.Store
	tables *plantable.Tables
	opts   ClientsOptions
	log    *logx.Limited

	mu       sync.Mutex
	followed map[config.PlanTable]*tableFollower

	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// ClientsOptions are a Clients' settings.
type ClientsOptions struct {
	// Wait is how long one read of a table's log waits for a change
	// (default 1 s); a change is applied as soon as it arrives.
	Wait time.Duration
	// Rules is how often the live rules are looked at for tables to
	// follow or drop (default 200 ms).
	Rules time.Duration
	// Logger takes outages, at most one line per 10 s.
	Logger *slog.Logger
	// Now is the clock of the tables' age (default time.Now).
	Now func() time.Time
}

// tableFollower is one table's follower and what it reports.
type tableFollower struct {
	key     config.PlanTable
	cancel  context.CancelFunc
	done    chan struct{}
	table   atomic.Pointer[plantable.Table]
	seq     atomic.Int64
	synced  atomic.Int64 // unix ns of the last read that reached the store; 0: none
	scans   atomic.Int64
	failing atomic.Bool // the last read failed: the store is unreachable
}

// TableStatus is one followed table's state.
type TableStatus struct {
	config.PlanTable
	Loaded  bool
	Clients int64
	Bytes   int64
	Seq     int64
	Scans   int64
	// Age is the time since the store was last read (negative: never).
	Age time.Duration
	// Failing says the last read of the store failed.
	Failing bool
}

// NewClients returns a Clients filling tables with the tables the rules
// in rules name, from store.
func NewClients(store *rulestore.Store, rules *config.Store, tables *plantable.Tables, opts ClientsOptions) *Clients {
	if opts.Wait <= 0 {
		opts.Wait = time.Second
	}
	if opts.Rules <= 0 {
		opts.Rules = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Clients{store: store, rules: rules, tables: tables, opts: opts, log: logx.New(opts.Logger, 10*time.Second),
		followed: map[config.PlanTable]*tableFollower{}, kick: make(chan struct{}, 1)}
}

// Start follows the tables the live rules name, in the background until
// Stop. It does not wait for the tables: until a table is loaded its
// clients are held to their rules' own limits.
func (c *Clients) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	c.reconcile(ctx)
	go func() {
		defer close(c.done)
		t := time.NewTicker(c.opts.Rules)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.reconcile(ctx)
			case <-c.kick:
				c.reconcile(ctx)
			}
		}
	}()
	return nil
}

// Stop ends following every table and waits, or until ctx ends.
func (c *Clients) Stop(ctx context.Context) error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	c.mu.Lock()
	var all []*tableFollower
	for _, f := range c.followed {
		all = append(all, f)
	}
	c.mu.Unlock()
	for _, w := range append(all, &tableFollower{done: c.done}) {
		select {
		case <-w.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Kick looks at the live rules now rather than at the next tick: the
// rules just changed here.
func (c *Clients) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// WaitSeq waits until this process holds domain's table up to sequence
// number seq (a write just made here), or until ctx ends; false then.
func (c *Clients) WaitSeq(ctx context.Context, domain, table string, seq int64) bool {
	c.Kick()
	for {
		c.mu.Lock()
		f := c.followed[config.PlanTable{Domain: domain, Table: table}]
		c.mu.Unlock()
		if f != nil && f.seq.Load() >= seq && c.tables.Get(domain, table) != nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Millisecond): // the follower's goroutine, woken by the write
		}
	}
}

// reconcile starts following tables the rules name and stops the others.
func (c *Clients) reconcile(ctx context.Context) {
	want := map[config.PlanTable]bool{}
	if rs := c.rules.Load(); rs != nil {
		for _, t := range rs.PlanTables() {
			want[t] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, f := range c.followed {
		if !want[k] {
			f.cancel()
			delete(c.followed, k)
			c.tables.Set(k.Domain, k.Table, nil)
		}
	}
	for k := range want {
		if c.followed[k] == nil && ctx.Err() == nil {
			fctx, cancel := context.WithCancel(ctx)
			f := &tableFollower{key: k, cancel: cancel, done: make(chan struct{})}
			c.followed[k] = f
			go c.follow(fctx, f)
		}
	}
}

// scanBatch is how many clients a scan applies at a time.
const scanBatch = 100_000

// follow keeps one table: a scan, then the log, until ctx ends.
func (c *Clients) follow(ctx context.Context, f *tableFollower) {
	defer close(f.done)
	backoff := 100 * time.Millisecond
	fail := func(what string, err error) {
		f.failing.Store(true)
		c.log.Warn("rules store: client table "+what+" failed; the table held stays live", "domain", f.key.Domain, "table", f.key.Table, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	for ctx.Err() == nil {
		t := f.table.Load()
		if t == nil {
			nt, seq, err := c.scan(ctx, f.key)
			if err != nil {
				if ctx.Err() == nil {
					fail("scan", err)
				}
				continue
			}
			f.table.Store(nt)
			f.seq.Store(seq)
			f.scans.Add(1)
			c.reached(f)
			backoff = 100 * time.Millisecond
			// live only once it has caught up with the log below: a scan
			// of a large table is seconds old when it ends
			c.catchUp(ctx, f, nt)
			if ctx.Err() == nil {
				c.tables.Set(f.key.Domain, f.key.Table, nt)
			}
			continue
		}
		bs, err := c.store.ClientChanges(ctx, f.key.Domain, f.key.Table, f.seq.Load(), c.opts.Wait)
		switch {
		case errors.Is(err, rulestore.ErrClientLogGap):
			c.log.Warn("rules store: fell behind a client table's log; scanning it again", "domain", f.key.Domain, "table", f.key.Table)
			f.table.Store(nil) // the live one stays in c.tables until the new scan is complete
			continue
		case err != nil:
			if ctx.Err() == nil {
				fail("read", err)
			}
			continue
		}
		c.reached(f)
		backoff = 100 * time.Millisecond
		if err := apply(t, bs, f); err != nil {
			// the table numbered more plan names than it can (names are
			// never forgotten here, though the store forgets unused ones):
			// a new scan numbers only those in use
			f.table.Store(nil)
			fail("apply", err)
		}
	}
}

// catchUp applies the log after a scan until it is empty.
func (c *Clients) catchUp(ctx context.Context, f *tableFollower, t *plantable.Table) {
	for ctx.Err() == nil {
		bs, err := c.store.ClientChanges(ctx, f.key.Domain, f.key.Table, f.seq.Load(), 0)
		if err != nil || len(bs) == 0 {
			return // the loop reads the log again (or scans again) next
		}
		if apply(t, bs, f) != nil {
			return
		}
	}
}

func (c *Clients) reached(f *tableFollower) {
	f.failing.Store(false)
	f.synced.Store(c.opts.Now().UnixNano())
}

// scan reads a whole table into a new plantable.Table, published.
func (c *Clients) scan(ctx context.Context, k config.PlanTable) (*plantable.Table, int64, error) {
	t := plantable.New()
	batch := make([]plantable.Change, 0, scanBatch)
	var applyErr error
	seq, err := c.store.ScanClients(ctx, k.Domain, k.Table, func(ch rulestore.ClientChange) error {
		batch = append(batch, plantable.Change{Key: t.Key(ch.Client), Plan: ch.Plan})
		if len(batch) == cap(batch) {
			applyErr = t.Apply(batch)
			batch = batch[:0]
		}
		return applyErr
	})
	if err == nil {
		err = t.Apply(batch)
	}
	if err != nil {
		return nil, 0, err
	}
	t.Publish()
	return t, seq, nil
}

func apply(t *plantable.Table, bs []rulestore.ClientBatch, f *tableFollower) error {
	for _, b := range bs {
		cs := make([]plantable.Change, len(b.Changes))
		for i, ch := range b.Changes {
			cs[i] = plantable.Change{Key: t.Key(ch.Client), Plan: ch.Plan}
		}
		if err := t.Apply(cs); err != nil {
			return err
		}
		f.seq.Store(b.Seq)
	}
	return nil
}

// Status reports every followed table, sorted.
func (c *Clients) Status() []TableStatus {
	c.mu.Lock()
	fs := make([]*tableFollower, 0, len(c.followed))
	for _, f := range c.followed {
		fs = append(fs, f)
	}
	c.mu.Unlock()
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].key.Domain != fs[j].key.Domain {
			return fs[i].key.Domain < fs[j].key.Domain
		}
		return fs[i].key.Table < fs[j].key.Table
	})
	out := make([]TableStatus, 0, len(fs))
	for _, f := range fs {
		st := TableStatus{PlanTable: f.key, Seq: f.seq.Load(), Scans: f.scans.Load(), Failing: f.failing.Load(), Age: -1}
		if lt := c.tables.Get(f.key.Domain, f.key.Table); lt != nil {
			st.Loaded, st.Clients, st.Bytes = true, lt.Len(), lt.Bytes()
		}
		if s := f.synced.Load(); s != 0 {
			st.Age = c.opts.Now().Sub(time.Unix(0, s))
		}
		out = append(out, st)
	}
	return out
}

// Ready says why the client tables are not to be trusted yet: a table
// being loaded from a store that answers. A table whose store cannot be
// reached does not hold readiness back (its clients are held to their
// rules' own limits meanwhile, and the outage is logged): a fleet
// restarted during an outage still serves.
func (c *Clients) Ready() error {
	var loading []string
	for _, st := range c.Status() {
		if !st.Loaded && !st.Failing {
			loading = append(loading, st.Domain+"/"+st.Table)
		}
	}
	if len(loading) > 0 {
		return fmt.Errorf("client tables loading from the rules store: %s", strings.Join(loading, ", "))
	}
	return nil
}
