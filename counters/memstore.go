package counters

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/limiter"
)

// MemStore is the in-memory counter store of `velvetrope dev` and the unit
// tests, with the semantics the Redis store has: counters per window or per
// bucket, per-instance parts, at-most-once application of deltas by
// (instance, partition, sequence), and atomic charges. Safe for concurrent
// use (one mutex: it is a development and test store).
type MemStore struct {
	mu   sync.Mutex
	win  map[winKey]*memCounter
	tat  map[string]*memCounter
	seen map[seqKey]uint64
	ctl  memControls // operator controls

	down      atomic.Bool                   // SetUnavailable: every call fails
	sync      memSync                       // mode: sync decisions, on the exact limiter
	leases    memLeases                     // concurrency rules' leases (leases.go)
	clock     atomic.Pointer[limiter.Clock] // the store's own clock (SetClock)
	instances map[string]int64              // the registry: instance → expiry (under mu)
	tickets   memTickets                    // deferred requests' states
	dfr       memDeferrals                  // deferred requests' ids and queued items (under mu)

	// Applied and Skipped count deltas applied and dropped as copies.
	Applied, Skipped atomic.Uint64
}

type winKey struct {
	key   string
	start int64
}

type seqKey struct {
	instance  string
	partition int
}

type memCounter struct {
	total  int64            // window count, or TAT (unix ns)
	cum    int64            // KindTAT: cumulative hits
	own    map[string]int64 // per instance: memory-path hits included (high-water)
	synced map[string]int64 // per instance: hits the store charged
	base   map[string]int64 // per instance: own+synced at the last reset
	gen    int64            // resets (buckets)
	marked map[string]bool  // instances whose charge folded all their memory hits here (first touch)
	end    int64            // expiry: window end + one window (sliding needs it), or the TAT
}

// mine returns instance's parts and the number of instances seen.
func (c *memCounter) mine(instance string) (mem, synced int64, instances int) {
	n := len(c.own)
	for k := range c.synced {
		if _, ok := c.own[k]; !ok {
			n++
		}
	}
	return c.own[instance], c.synced[instance], n
}

// parts returns instance's Own (less its base) and base.
func (c *memCounter) parts(instance string) (own, base int64) {
	b := c.base[instance]
	return c.own[instance] + c.synced[instance] - b, b
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{win: map[winKey]*memCounter{}, tat: map[string]*memCounter{}, seen: map[seqKey]uint64{}}
}

// SetUnavailable makes every Read, Charge and Refund fail (failure tests).
func (s *MemStore) SetUnavailable(down bool) { s.down.Store(down) }

func (s *MemStore) check() error {
	if s.down.Load() {
		return fmt.Errorf("%w: in-memory store switched off", ErrStoreUnavailable)
	}
	return nil
}

// Span is the time n hits take at tokens per period: ceil(n × period /
// tokens) in ns, saturating. A bucket's theoretical arrival time moves by it.
func Span(n, period, tokens int64) int64 {
	if n <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(n), uint64(period))
	if hi >= uint64(tokens) {
		return 1 << 62
	}
	q, r := bits.Div64(hi, lo, uint64(tokens))
	if r > 0 {
		q++
	}
	if q > 1<<62 {
		return 1 << 62
	}
	return int64(q)
}

// Read implements [Store].
func (s *MemStore) Read(_ context.Context, instance string, items []ReadItem) error {
	if err := s.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range items {
		it := &items[i]
		c := s.counter(it.Kind, it.Key, it.Window)
		it.Found, it.Total, it.Cum, it.Own, it.OwnMem, it.OwnSync, it.Instances = c != nil, 0, 0, 0, 0, 0, 0
		it.Base, it.Gen = 0, 0
		if c != nil {
			m, sy, n := c.mine(instance)
			it.Total, it.Cum, it.OwnMem, it.OwnSync, it.Instances, it.Gen = c.total, c.cum, m, sy, n, c.gen
			it.Own, it.Base = c.parts(instance)
		}
	}
	return nil
}

func (s *MemStore) counter(k Kind, key string, window int64) *memCounter {
	if k == KindTAT {
		return s.tat[key]
	}
	return s.win[winKey{key, window}]
}

// create returns the counter, making it if needed (requires s.mu held).
func (s *MemStore) create(k Kind, key string, window, windowNanos int64) *memCounter {
	if c := s.counter(k, key, window); c != nil {
		return c
	}
	c := &memCounter{own: map[string]int64{}, synced: map[string]int64{}}
	if k == KindTAT {
		s.tat[key] = c
	} else {
		c.end = window + 2*windowNanos
		s.win[winKey{key, window}] = c
	}
	return c
}

// Charge implements [Store].
func (s *MemStore) Charge(_ context.Context, r *ChargeRequest) (ChargeResult, error) {
	if err := s.check(); err != nil {
		return ChargeResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Kind == KindTAT {
		return s.chargeTAT(r), nil
	}
	return s.chargeWindow(r), nil
}

// The charges fold the caller's unapplied consumption into the counter
// (its part becomes OwnEmitted / OwnCum): the deltas that carry that
// consumption, still in flight, then add only what lies above the
// instance's part (own_after), so nothing is counted twice.

// fold adds an instance's counted-but-unapplied hits to a window counter
// and raises its part to them (requires s.mu held).
func fold(c *memCounter, instance string, emitted int64) {
	if own := c.own[instance]; emitted > own {
		c.total += emitted - own
		c.own[instance] = emitted
	}
}

func (s *MemStore) chargeWindow(r *ChargeRequest) ChargeResult {
	c := s.create(KindWindow, r.Key, r.Window, r.WindowNanos)
	fold(c, r.Instance, r.OwnEmitted)
	var prevTotal, prevOwn, prevBase, elapsed int64
	W := r.WindowNanos
	if r.Sliding {
		p := s.create(KindWindow, r.Key, r.Window-W, W)
		fold(p, r.Instance, r.PrevEmitted)
		prevTotal = p.total
		prevOwn, prevBase = p.parts(r.Instance)
		elapsed = min(max(r.Now-r.Window, 0), W)
	}
	reserved, prevReserved := c.reserved(r), int64(0)
	if r.Sliding {
		prevReserved = s.win[winKey{r.Key, r.Window - W}].reserved(r)
	}
	// exactly as the limiter decides (no rounding in anyone's favour); for
	// a fixed window prev is 0
	sc := limiter.SlidingCounts{Prev: prevTotal + r.PrevOtherShards + prevReserved, Cur: c.total + r.OtherShards + reserved,
		Elapsed: elapsed, Window: W}
	res := ChargeResult{Allowed: sc.Fits(r.Ceiling, r.Cost), PrevTotal: prevTotal, PrevOwn: prevOwn, PrevBase: prevBase,
		Reserved: reserved}
	if res.Allowed || r.ChargeDenied {
		c.total += r.Cost
		c.synced[r.Instance] += r.Cost
	}
	if r.Allowance > 0 && r.Mark { // charged here: no allowance spent in this window any more
		if c.marked == nil {
			c.marked = map[string]bool{}
		}
		c.marked[r.Instance] = true
	}
	m, sy, n := c.mine(r.Instance)
	res.Total, res.OwnMem, res.OwnSync, res.Instances = c.total, m, sy, n
	res.Own, res.Base = c.parts(r.Instance)
	return res
}

// reserved is what a charge holds back in c for the allowances of the
// other live instances (as chargeWindow's script): for each not marked in
// it, the allowance less its memory hits the window holds.
func (c *memCounter) reserved(r *ChargeRequest) int64 {
	var n int64
	if c == nil || r.Allowance <= 0 {
		return 0
	}
	for _, o := range r.Others {
		if !c.marked[o] {
			n += max(0, r.Allowance-c.own[o])
		}
	}
	return n
}

func (s *MemStore) chargeTAT(r *ChargeRequest) ChargeResult {
	c := s.tat[r.Key]
	if c == nil { // an absent bucket is full
		c = &memCounter{own: map[string]int64{}, synced: map[string]int64{}}
		s.tat[r.Key] = c
	}
	unapplied := max(0, r.OwnCum-c.own[r.Instance])
	base := max(c.total+Span(unapplied, r.WindowNanos, r.RateTokens), r.LocalTAT, r.Now)
	after := base + Span(r.Cost, r.WindowNanos, r.RateTokens)
	res := ChargeResult{Allowed: after-r.Now <= Span(r.Burst, r.WindowNanos, r.RateTokens)}
	c.total, c.cum = max(c.total, base), c.cum+unapplied
	if r.OwnCum > c.own[r.Instance] {
		c.own[r.Instance] = r.OwnCum
	}
	if res.Allowed {
		c.total = after
		c.cum += r.Cost
		c.synced[r.Instance] += r.Cost
	}
	m, sy, n := c.mine(r.Instance)
	res.Total, res.Cum, res.OwnMem, res.OwnSync, res.Instances, res.Gen = c.total, c.cum, m, sy, n, c.gen
	res.Own, res.Base = c.parts(r.Instance)
	return res
}

// Reset implements [Resetter].
func (s *MemStore) Reset(_ context.Context, items []ResetItem) error {
	if err := s.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		c := s.counter(it.Kind, it.Key, it.Window)
		if c == nil {
			continue
		}
		if c.base == nil {
			c.base = map[string]int64{}
		}
		for inst := range c.own {
			c.base[inst] = c.own[inst] + c.synced[inst]
		}
		for inst := range c.synced {
			c.base[inst] = c.own[inst] + c.synced[inst]
		}
		c.total, c.cum = 0, 0
		c.gen++
	}
	return nil
}

// Refund implements [Store].
func (s *MemStore) Refund(_ context.Context, r *ChargeRequest) error {
	if err := s.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counter(r.Kind, r.Key, r.Window)
	if c == nil {
		return nil
	}
	if r.Kind == KindTAT {
		c.total -= Span(r.Cost, r.WindowNanos, r.RateTokens)
		c.cum -= r.Cost
	} else {
		c.total = max(0, c.total-r.Cost)
	}
	c.synced[r.Instance] = max(0, c.synced[r.Instance]-r.Cost)
	return nil
}

// Apply applies one delta read from partition, at most once: a delta whose
// sequence is not above the highest applied for its (instance, partition)
// is a copy and is skipped. Deltas marked already applied carry analytics
// only and change nothing, as in [Redis.ApplyBatch]. It reports whether the
// delta was new.
func (s *MemStore) Apply(partition int, d *eventsv1.Delta) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.AlreadyApplied {
		return true
	}
	sk := seqKey{d.InstanceId, partition}
	if d.Sequence <= s.seen[sk] {
		s.Skipped.Add(1)
		return false
	}
	s.seen[sk] = d.Sequence
	s.Applied.Add(1)
	if d.CountedCost == 0 {
		return true
	}
	var c *memCounter
	bucket := false
	if config.Algorithm(d.Algorithm).Bucket() {
		c, bucket = s.create(KindTAT, d.CounterKey, 0, 0), true
	} else {
		c = s.create(KindWindow, d.CounterKey, d.WindowStartUnixNanos, d.WindowNanos)
	}
	add := ApplyAmount(c.own[d.InstanceId], d)
	c.own[d.InstanceId] = max(c.own[d.InstanceId]+add, int64(d.OwnAfter))
	if bucket {
		c.total = max(max(c.total, d.FirstUnixNanos)+Span(add, d.WindowNanos, d.RateTokens), d.TatAfterUnixNanos)
		c.cum += add
	} else {
		c.total += add
	}
	return true
}

// ApplyAmount is how many hits of d a counter must add, given the part
// of the emitting instance it already holds (own): with own_after known,
// only what lies above own (a charge may have folded the rest in already);
// without it, all counted hits.
func ApplyAmount(own int64, d *eventsv1.Delta) int64 {
	if d.OwnAfter > 0 {
		return max(0, min(int64(d.CountedCost), int64(d.OwnAfter)-own))
	}
	return int64(d.CountedCost)
}

// Expire drops counters that carry no information any more at now: windows
// over (kept one extra window for sliding windows) and full buckets.
func (s *MemStore) Expire(now int64) (removed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.win {
		if c.end <= now {
			delete(s.win, k)
			removed++
		}
	}
	for k, c := range s.tat {
		if c.total <= now {
			delete(s.tat, k)
			removed++
		}
	}
	return removed
}

// memControls is MemStore's control table.
type memControls struct {
	version int64
	byID    map[string]Control
}

// PutControl implements ControlStore.
func (s *MemStore) PutControl(_ context.Context, c Control) error {
	if err := s.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctl.byID == nil {
		s.ctl.byID = map[string]Control{}
	}
	c.Entries = slices.Clone(c.Entries)
	s.ctl.byID[c.ID] = c
	s.ctl.version++
	return nil
}

// DeleteControl implements ControlStore.
func (s *MemStore) DeleteControl(_ context.Context, id string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ctl.byID[id]
	if ok {
		delete(s.ctl.byID, id)
		s.ctl.version++
	}
	return ok, nil
}

// Controls implements ControlStore; expired controls are dropped here.
func (s *MemStore) Controls(_ context.Context, since, now int64) (int64, []Control, error) {
	if err := s.check(); err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.ctl.byID {
		if !c.Live(now) {
			delete(s.ctl.byID, id)
			s.ctl.version++
		}
	}
	if s.ctl.version == since {
		return since, nil, nil
	}
	out := make([]Control, 0, len(s.ctl.byID))
	for _, c := range s.ctl.byID {
		c.Entries = slices.Clone(c.Entries)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Control) int { return strings.Compare(a.ID, b.ID) })
	return s.ctl.version, out, nil
}

// memSync is MemStore's sync state: the exact limiter itself.
type memSync struct {
	once  sync.Once
	keyed *limiter.Keyed
}

// ChargeSync implements [SyncStore] with limiter.Keyed: the reference the
// Redis scripts are tested against.
func (s *MemStore) ChargeSync(_ context.Context, q *SyncRequest) (SyncResult, error) {
	if err := s.check(); err != nil {
		return SyncResult{}, err
	}
	if q.Algorithm == config.AlgConcurrency {
		if err := checkLease(q); err != nil {
			return SyncResult{}, err
		}
		now := q.Now
		if now == 0 {
			now = s.now()
		}
		return s.leases.acquire(q, now), nil
	}
	alg, err := syncAlgorithm(q)
	if err != nil {
		return SyncResult{}, err
	}
	s.sync.once.Do(func() {
		s.sync.keyed, _ = limiter.NewKeyed(limiter.WithIdempotency(time.Hour, 1<<16))
	})
	now := q.Now
	if now == 0 {
		now = s.now()
	}
	allow := s.sync.keyed.AllowAt
	if q.Force {
		allow = s.sync.keyed.ForceAt
	}
	d, err := allow(syncKey(q), alg, now, q.Cost, q.IdempotencyKey())
	if err != nil && !errors.Is(err, limiter.ErrCostExceedsLimit) {
		return SyncResult{}, err
	}
	return SyncResult{Allowed: d.Allowed, Remaining: d.Remaining, ResetAfter: max(d.ResetAfter, 0),
		RetryAfter: d.RetryAfter, Token: fmt.Sprint(now)}, nil
}

// RefundSync implements [SyncStore].
func (s *MemStore) RefundSync(_ context.Context, q *SyncRequest, token string) error {
	if err := s.check(); err != nil {
		return err
	}
	if q.Algorithm == config.AlgConcurrency {
		if token != "" {
			s.leases.release(q, token, s.now())
		}
		return nil
	}
	alg, err := syncAlgorithm(q)
	if err != nil || s.sync.keyed == nil {
		return err
	}
	now := q.Now
	if now == 0 {
		now = s.now()
	}
	return s.sync.keyed.RefundAt(syncKey(q), alg, now, q.Cost)
}

// ResetSync implements [Resetter].
func (s *MemStore) ResetSync(_ context.Context, q *SyncRequest) error {
	if err := s.check(); err != nil {
		return err
	}
	if q.Algorithm == config.AlgConcurrency {
		s.leases.reset(q)
		return nil
	}
	alg, err := syncAlgorithm(q)
	if err != nil || s.sync.keyed == nil {
		return err
	}
	s.sync.keyed.Reset(syncKey(q), alg)
	return nil
}

func syncKey(q *SyncRequest) string { return string(q.Algorithm) + "|" + q.Key }

// now is the store's own clock (SetClock), the wall clock by default.
func (s *MemStore) now() int64 {
	if c := s.clock.Load(); c != nil {
		return (*c).Now()
	}
	return time.Now().UnixNano()
}

// SetClock makes clk the store's own clock (for `mode: sync` decisions),
// as Redis TIME is for the Redis store. Tests share their fake clock.
func (s *MemStore) SetClock(clk limiter.Clock) { s.clock.Store(&clk) }

// Keys lists the counter keys the store holds (windows and buckets), in no
// particular order: what a test checks reached the store.
func (s *MemStore) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.win {
		out = append(out, k.key)
	}
	for k := range s.tat {
		out = append(out, k)
	}
	return out
}
