package checker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/breaker"
	"github.com/velvetrope/velvetrope/internal/controlset"
	"github.com/velvetrope/velvetrope/internal/digest"
	"github.com/velvetrope/velvetrope/internal/hist"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/internal/outbox"
	"github.com/velvetrope/velvetrope/internal/rates"
	"github.com/velvetrope/velvetrope/internal/skewclock"
	"github.com/velvetrope/velvetrope/internal/valuehash"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/plantable"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Config tunes the async Checker: the settings a process has too
// (checker.* in docs/configuration.md; zero fields take their defaults,
// [config.CheckerConfig.WithDefaults]), and the library's own.
type Config struct {
	config.CheckerConfig
	// InstanceName is this checker's configured name; the instance id is
	// the name, "/", and a nonce drawn at every start.
	InstanceName   string
	Shards         int                 // lock shards, a power of two (256)
	LocalMaxKeys   int                 // keys of `mode: local` rules in the in-process limiter (limiter.DefaultMaxKeys)
	FlushThreshold int                 // dirty keys that trigger an early flush (4096)
	MaxBuffered    int                 // deltas held while the producer refuses them (1<<20)
	RefreshTick    time.Duration       // refresher wake-up (10 ms)
	IdempotencyTTL time.Duration       // request ids remembered (0: none; limiter.idempotency_ttl)
	Bounds         config.LimitsConfig // a request's size (zero fields: config.DefaultLimits)
	Logger         *slog.Logger
	// Plans are the client tables rules with plans read their clients'
	// plans from (nil: every client is decided at its rule's own limit).
	Plans *plantable.Tables
}

// defaults fills the zero fields and checks what the engine needs.
func (c *Config) defaults() error {
	c.CheckerConfig = c.CheckerConfig.WithDefaults()
	c.Shards, c.LocalMaxKeys = cmp.Or(c.Shards, 256), cmp.Or(c.LocalMaxKeys, limiter.DefaultMaxKeys)
	c.FlushThreshold, c.MaxBuffered = cmp.Or(c.FlushThreshold, 4096), cmp.Or(c.MaxBuffered, 1<<20)
	c.InstanceName, c.RefreshTick = cmp.Or(c.InstanceName, "checker"), cmp.Or(c.RefreshTick, 10*time.Millisecond)
	c.Logger, c.Bounds = cmp.Or(c.Logger, slog.New(slog.DiscardHandler)), c.Bounds.WithDefaults()
	if err := c.Bounds.Validate(); err != nil {
		return fmt.Errorf("checker: bounds: %w", err)
	}
	switch {
	case c.Shards&(c.Shards-1) != 0 || c.Shards < 1:
		return fmt.Errorf("checker: shards %d: must be a power of two", c.Shards)
	case c.MaxKeys < c.Shards:
		return fmt.Errorf("checker: max keys %d: must be at least the shard count %d", c.MaxKeys, c.Shards)
	case c.LocalMaxKeys < limiter.DefaultShards:
		return fmt.Errorf("checker: local max keys %d: must be at least %d", c.LocalMaxKeys, limiter.DefaultShards)
	case c.MaxEmitInterval > time.Minute:
		return fmt.Errorf("checker: max emit interval %v: at most a minute (one analytics row)", c.MaxEmitInterval)
	case c.InstanceTTL < c.Heartbeat:
		return fmt.Errorf("checker: instance ttl %v below the heartbeat %v", c.InstanceTTL, c.Heartbeat)
	case c.MinRefresh > c.MaxRefresh:
		return fmt.Errorf("checker: min refresh %v above max refresh %v", c.MinRefresh, c.MaxRefresh)
	case c.SafetyPercent < 100:
		return fmt.Errorf("checker: safety percent %d: must be at least 100", c.SafetyPercent)
	case c.MaxHeldHits < 0 || c.MaxHeldTotal < 0:
		return fmt.Errorf("checker: max held hits %d and total %d: must not be negative", c.MaxHeldHits, c.MaxHeldTotal)
	}
	return nil
}

// Stats are the counters background passes and the rarer decision paths
// update (monotonic, atomic); [Checker.Snapshot] adds the shards' to them.
type Stats struct {
	SyncCharges, Refunds     atomic.Uint64
	Late, LateFailed         atomic.Uint64 // charges after the response counted; refused by a failing store
	LeasesReleased           atomic.Uint64 // concurrency leases released (by id, or a counter's oldest)
	Degraded                 atomic.Uint64
	Refreshes, RefreshErrors atomic.Uint64
	Flushes                  atomic.Uint64
	Evictions, EvictedDirty  atomic.Uint64
	Keys                     atomic.Int64
	Controlled               atomic.Uint64  // descriptors an operator control decided
	ControlErrors            atomic.Uint64  // failed reads of the control store
	StagedErrors             atomic.Uint64  // staged decisions that failed (their answer is thrown away anyway)
	StoreErrors              atomic.Uint64  // failed store charges (refreshes: RefreshErrors)
	Staleness                hist.Histogram // a store view's age when a refresh replaces it
	// decisions that locked no shard (local-mode or unlimited rules only)
	unsharded, unshardedDenied atomic.Uint64
}

// shardStats are per-decision counters under the shard's mutex: the
// request path updates no shared cache line.
type shardStats struct {
	decisions, denied, far, near, over, first uint64
}

// Snapshot is a point-in-time copy of the checker's counters.
type Snapshot struct {
	Decisions, Denied                  uint64
	FarBand, NearBand, OverBand        uint64
	FirstTouch                         uint64 // decided from memory on the first-touch allowance
	SyncCharges, Refunds, Degraded     uint64
	Refreshes, RefreshErrors           uint64
	Flushes, DeltasEmitted, EmitErrors uint64
	Evictions, EvictedDirty            uint64
	Keys                               int64
	CompactKeys                        int64 // keys held as compact records (their windows' ends not yet passed, or not yet dropped)
	KeyBytes                           int64 // the key table's heap as estimated (Config.MaxBytes)
	// HeldHits is what lazy keys hold back, in no delta yet (at most
	// MaxHeldTotal): what a kill -9 loses beside the next flush's keys.
	HeldHits                  int64
	Controlled, ControlErrors uint64
}

// Snapshot adds up the counters.
func (c *Checker) Snapshot() Snapshot {
	s := Snapshot{
		Decisions: c.Stats.unsharded.Load(), Denied: c.Stats.unshardedDenied.Load(),
		SyncCharges: c.Stats.SyncCharges.Load(), Refunds: c.Stats.Refunds.Load(), Degraded: c.Stats.Degraded.Load(),
		Refreshes: c.Stats.Refreshes.Load(), RefreshErrors: c.Stats.RefreshErrors.Load(),
		Flushes: c.Stats.Flushes.Load(), DeltasEmitted: c.out.Emitted.Load(), EmitErrors: c.out.Errors.Load(),
		Evictions: c.Stats.Evictions.Load(), EvictedDirty: c.Stats.EvictedDirty.Load(), Keys: c.Stats.Keys.Load(),
		KeyBytes:   c.bytes.Load(),
		Controlled: c.Stats.Controlled.Load(), ControlErrors: c.Stats.ControlErrors.Load(),
	}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		st := sh.stats
		s.HeldHits += sh.held
		s.CompactKeys += int64(sh.compact.Len())
		sh.mu.Unlock()
		s.Decisions += st.decisions
		s.Denied += st.denied
		s.FarBand += st.far
		s.NearBand += st.near
		s.OverBand += st.over
		s.FirstTouch += st.first
	}
	return s
}

// Checker is the async checker (docs/design.md): it decides from counters
// in memory, calls the store only near a limit and emits consumption
// deltas off the request path. Safe for concurrent use.
type Checker struct {
	cfg          Config
	rules        *config.Store
	store        counters.Store
	prod         events.Producer
	clock        *skewclock.Clock // the given clock, clamped to the store's
	live         atomic.Int32     // live checkers, as the registry last said (0: not yet)
	ft           firstTouch       // the first-touch allowance's membership (firsttouch.go)
	local        *limiter.Keyed
	instance     string
	seed         maphash.Seed
	localKeys    digest.Digester // local-mode keys in the limiter
	shards       []shard
	mask         uint64
	perShard     int
	band         rates.Band    // the near band's sizing
	heldPerShard int64         // a lock shard's share of MaxHeldTotal
	streams      atomic.Uint64 // analytics stream ids, one per key entry
	bytes        atomic.Int64  // the key table's estimated heap (membytes.go)
	ids          *ratelimit.RequestIDs
	scratch      sync.Pool         // *scratch, for requests of many descriptors
	works        sync.Pool         // *syncWork, one per store charge
	batch        *counters.Batcher // sends the store charges of concurrent decisions together
	keyBufs      sync.Pool         // *[]byte, counter keys of small requests
	// stagedDecisions are the thrown-away answers of staged rules
	stagedDecisions sync.Pool // *ratelimit.Decision

	flushNow chan struct{}
	dirtyN   atomic.Int64 // keys queued for the next flush
	slots    int          // emission wheel slots (0: no lazy emission)
	lastTick int64        // the last flush tick emitted (under flushMu)
	flushMu  sync.Mutex
	// compact keys' decisions go every freshEvery flush ticks, next at
	// nextFresh (under flushMu)
	freshEvery, nextFresh int64
	out                   *outbox.Outbox // deltas on their way to the producer (under flushMu)
	refreshMu             sync.Mutex
	refreshNext           int                 // shard the next refresher pass starts at (under refreshMu)
	readItems             []counters.ReadItem // refresher scratch (under refreshMu)
	readEnts              []*entry
	readTags              []uint8

	ctl *controlset.Poller // operator controls (nil: the store keeps none)

	brk  *breaker.Breaker
	stop chan struct{}
	wg   sync.WaitGroup
	// one rate-limited log per kind: one repeating never hides another
	logFlush, logStore, logRefresh, logControls *logx.Limited
	hash                                        *valuehash.Hasher // hash_values entries
	hashLog                                     sync.Once

	Stats Stats
}

// New returns a Checker deciding with the live rules, charging and
// reading counters in cs, emitting deltas through prod, on clock.
func New(cfg Config, rules *config.Store, cs counters.Store, prod events.Producer, clock limiter.Clock) (*Checker, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if rules == nil || cs == nil || prod == nil || clock == nil {
		return nil, errors.New("checker: New needs rules, a counter store, a producer and a clock")
	}
	sc := skewclock.New(clock)
	local, err := limiter.NewKeyed(limiter.WithMaxKeys(cfg.LocalMaxKeys), limiter.WithClock(sc))
	if err != nil {
		return nil, err
	}
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	c := &Checker{cfg: cfg, rules: rules, store: cs, prod: prod, clock: sc, local: local,
		instance: cfg.InstanceName + "/" + hex.EncodeToString(nonce[:]), seed: maphash.MakeSeed(),
		localKeys: digest.New(),
		shards:    make([]shard, cfg.Shards), mask: uint64(cfg.Shards - 1), perShard: max(cfg.MaxKeys/cfg.Shards, 1),
		heldPerShard: max(cfg.MaxHeldTotal/int64(cfg.Shards), 1),
		band: rates.Band{Floor: cfg.NearFloor, FloorPercent: cfg.NearFloorPct,
			Cover: (cfg.MinRefresh + cfg.PipelineLag) * time.Duration(cfg.SafetyPercent) / 100},
		flushNow: make(chan struct{}, 1)}
	for i := range c.shards {
		c.shards[i].keys = map[uint64]*entry{}
		c.shards[i].compact = c.compactTable()
	}
	c.startFirstTouch()
	if cfg.MaxEmitInterval > cfg.FlushInterval {
		c.slots = int(cfg.MaxEmitInterval/cfg.FlushInterval) + 2
	}
	c.freshEvery = max(1, int64(min(cfg.MaxEmitInterval, freshAfter)/cfg.FlushInterval))
	for _, l := range []**logx.Limited{&c.logFlush, &c.logStore, &c.logRefresh, &c.logControls} {
		*l = logx.New(cfg.Logger, 10*time.Second)
	}
	if c.hash, err = valuehash.New([]byte(cfg.HashKey)); err != nil {
		return nil, err
	}
	c.out = outbox.New(prod, cfg.MaxBuffered, flushBatch)
	c.brk = breaker.New(cfg.BreakerFailures, cfg.BreakerOpenFor)
	if cst, ok := cs.(counters.ControlStore); ok {
		c.ctl = controlset.NewPoller(cst, rules, c.seed)
	}
	if cfg.IdempotencyTTL > 0 {
		c.ids = ratelimit.NewRequestIDs(cfg.IdempotencyTTL, 1<<16)
	}
	c.scratch.New = func() any { return &scratch{buf: make([]byte, 0, 1024)} }
	c.works.New = func() any { return &syncWork{Call: *counters.NewCall()} }
	c.batch = counters.NewBatcher(cs, storeLanes)
	c.keyBufs.New = func() any { b := make([]byte, 0, 512); return &b }
	c.stagedDecisions.New = func() any { return new(ratelimit.Decision) }
	return c, nil
}

// freshAfter is how long compact keys' decisions may wait for a flush
// (at most max_emit_interval): a few flushes' worth, so that their deltas
// go in a few records per partition a second.
const freshAfter = 250 * time.Millisecond

// flushBatch is the most deltas handed to the producer in one call: a
// flush's, so that the producer packs each partition's deltas of it into
// one record (a call of 2,048 made a 250 ms round of compact keys at
// 30,000 decisions a second four records per partition), while a burst
// past it is still encoded a part at a time.
const flushBatch = 1 << 16

// storeLanes is the batches of store charges in flight at once: the
// connection stays busy, and a busy front sends many charges per trip.
const storeLanes = 4

// Queue reports what the producer does not have yet: keys with pending
// consumption (of them, lazy ones) and refused deltas waiting.
func (c *Checker) Queue() (dirtyKeys, lazyKeys int64, buffered int) {
	c.flushMu.Lock()
	buffered = c.out.Held()
	c.flushMu.Unlock()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		lazyKeys += int64(sh.lazyN)
		sh.mu.Unlock()
	}
	return c.dirtyN.Load() + lazyKeys, lazyKeys, buffered
}

// Breaker reports the store's circuit breaker: its state, how often it
// opened and the calls it refused.
func (c *Checker) Breaker() (state breaker.State, opens, rejected uint64) {
	return c.brk.State(c.clock.Now()), c.brk.Opens.Load(), c.brk.Rejected.Load()
}

// StoreReady is an error while the store's breaker is open.
func (c *Checker) StoreReady() error {
	if c.brk.State(c.clock.Now()) == breaker.Open {
		return fmt.Errorf("%w: circuit breaker open after repeated failures", counters.ErrStoreUnavailable)
	}
	return nil
}

// Instance returns this checker's instance id (name/nonce).
func (c *Checker) Instance() string { return c.instance }

// Rules returns the live rule set.
func (c *Checker) Rules() *config.RuleSet { return c.rules.Load() }

// Start runs the flusher, the refresher, the heartbeat and the controls'
// poller; first calls that fail are logged and retried in the background.
func (c *Checker) Start(ctx context.Context) error {
	c.stop = make(chan struct{})
	c.ft.started.Store(true)
	hctx, cancel := context.WithTimeout(ctx, 4*c.cfg.StoreTimeout)
	if err := c.heartbeat(hctx); err != nil {
		c.cfg.Logger.Warn("first heartbeat to the counter store failed; retrying in the background", "error", err)
	}
	cancel()
	c.wg.Add(3)
	go c.flushLoop()
	go c.refreshLoop()
	go c.heartbeatLoop()
	if c.ctl != nil {
		if err := c.SyncControls(ctx); err != nil {
			c.cfg.Logger.Warn("operator controls not read at start; retrying in the background", "err", err)
		}
		c.wg.Add(1)
		go c.controlLoop()
	}
	return nil
}

// Stop ends the background loops and emits everything counted, within ctx.
func (c *Checker) Stop(ctx context.Context) error {
	if c.stop == nil {
		return nil
	}
	close(c.stop)
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.Flush(ctx)
}
