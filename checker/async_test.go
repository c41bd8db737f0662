package checker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// applyProducer hands every delta straight to a counters.MemStore, as an aggregator
// with no lag would; it also records what it saw.
type applyProducer struct {
	mu     sync.Mutex
	store  *counters.MemStore
	hold   bool // keep deltas instead of applying (pipeline lag)
	held   []*eventsv1.Delta
	all    []*eventsv1.Delta
	fail   error
	closed bool
}

func (p *applyProducer) Produce(_ context.Context, ds []*eventsv1.Delta) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.all = append(p.all, ds...)
	if p.hold {
		p.held = append(p.held, ds...)
		return nil
	}
	for _, d := range ds {
		p.store.Apply(0, d)
	}
	return nil
}

func (p *applyProducer) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.held {
		p.store.Apply(0, d)
	}
	p.held = nil
}

func (p *applyProducer) Close(context.Context) error { p.closed = true; return nil }

// countingStore counts calls to the store.
type countingStore struct {
	*counters.MemStore
	reads, charges atomic.Int64
}

func (s *countingStore) Read(ctx context.Context, inst string, items []counters.ReadItem) error {
	s.reads.Add(1)
	return s.MemStore.Read(ctx, inst, items)
}

func (s *countingStore) Charge(ctx context.Context, r *counters.ChargeRequest) (counters.ChargeResult, error) {
	s.charges.Add(1)
	return s.MemStore.Charge(ctx, r)
}

func (s *countingStore) Do(ctx context.Context, ops []*counters.Op) {
	for _, op := range ops {
		if !op.Sync {
			s.charges.Add(1)
		}
	}
	s.MemStore.Do(ctx, ops)
}

const asyncRules = `domain: api
descriptors:
  - key: envoy
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: fixed
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: bucket
    algorithm: token_bucket
    burst: 10
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: gcra
    algorithm: gcra
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: leaky
    algorithm: leaky_bucket
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: soft
    algorithm: fixed_window
    throttle: {type: soft, overage_percent: 50}
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: shadow
    algorithm: fixed_window
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: local
    algorithm: token_bucket
    mode: local
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: syncmode
    algorithm: fixed_window
    mode: sync
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: nearasync
    algorithm: fixed_window
    near_limit: async
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: closed
    algorithm: fixed_window
    failure: closed
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: budget
    algorithm: fixed_window
    failure: local_budget
    rate_limit: {unit: second, requests_per_unit: 8}
  - key: free
    rate_limit: {unlimited: true}
  - key: big
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: huge
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: old
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 2, name: old_limit}
  - key: new
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 9, replaces: [{name: old_limit}]}
  - key: envoyshadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 4}
`

func ruleStore(t testing.TB, src string) *config.Store {
	t.Helper()
	f, err := config.ParseRules("rules.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	return config.NewStore(rs)
}

type rig struct {
	c     *Checker
	store *countingStore
	prod  *applyProducer
	clk   *clock
}

func newRig(t testing.TB, cfg Config) *rig {
	t.Helper()
	ms := counters.NewMemStore()
	cs := &countingStore{MemStore: ms}
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(cfg, ruleStore(t, asyncRules), cs, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, store: cs, prod: prod, clk: clk}
}

func (r *rig) check(t testing.TB, hits int64, kv ...string) Decision {
	t.Helper()
	var d Decision
	if err := r.c.Check(context.Background(), req(hits, kv...), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestAsyncBands(t *testing.T) {
	r := newRig(t, Config{})
	ms := int64(time.Millisecond)
	// a new key is near until two store answers taught its rate
	r.check(t, 1, "big", "a")
	r.clk.ns.Add(20 * ms)
	r.check(t, 1, "big", "a")
	if got := r.store.charges.Load(); got != 2 {
		t.Fatalf("first decisions: %d charges, want 2", got)
	}
	// a young key stays near (its other users may not have reached the
	// store yet): past min_refresh + pipeline_lag it may go far
	r.clk.ns.Add(80 * ms)
	r.check(t, 1, "big", "a")
	if got := r.store.charges.Load(); got != 3 {
		t.Fatalf("young key: %d charges, want 3", got)
	}
	r.clk.ns.Add(300 * ms)
	// far from the limit: memory only
	for range 100 {
		r.clk.ns.Add(ms)
		if d := r.check(t, 1, "big", "a"); !d.Allowed() {
			t.Fatal("refused far from the limit")
		}
	}
	if got := r.store.charges.Load(); got != 3 {
		t.Fatalf("far band: %d charges, want still 3", got)
	}
	// approach the limit: the near band charges the store for each decision
	admitted := int64(103)
	for range 10 {
		r.clk.ns.Add(ms)
		if d := r.check(t, 100, "big", "a"); d.Allowed() {
			admitted += 100
		}
	}
	if admitted > 1000 {
		t.Fatalf("admitted %d, limit 1000", admitted)
	}
	near := r.store.charges.Load() - 3
	if near < 1 {
		t.Fatal("no store charge near the limit")
	}
	// over: refused from memory
	before := r.store.charges.Load()
	for range 50 {
		if d := r.check(t, 100, "big", "a"); d.Allowed() {
			t.Fatal("admitted over the limit")
		}
	}
	if got := r.store.charges.Load() - before; got > 1 {
		t.Fatalf("over band: %d store calls for 50 refusals, want at most 1", got)
	}
	if st := r.c.Snapshot(); st.OverBand < 49 || st.FarBand < 100 || st.NearBand == 0 || st.Decisions < 160 {
		t.Fatalf("stats: %+v", st)
	}
	// the window rolls: room again
	r.clk.ns.Add(int64(time.Second))
	if d := r.check(t, 1, "big", "a"); !d.Allowed() {
		t.Fatal("refused in a new window")
	}
}

func TestAsyncFailurePolicies(t *testing.T) {
	cases := []struct {
		key        string
		wantAllow  int
		wantDegrad bool
	}{
		{"fixed", 20, true}, // open: admits, counted, applied later
		{"closed", 0, true}, // closed: refuses
		{"budget", 8, true}, // local_budget: this instance's share (1 instance: all that remained)
		{"local", 5, false}, // mode local never needs the store
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			r := newRig(t, Config{})
			r.store.SetUnavailable(true)
			allowed, degraded := 0, false
			for range 25 {
				d := r.check(t, 1, c.key, "x")
				if d.Allowed() {
					allowed++
				}
				degraded = degraded || d.Statuses[0].Degraded
			}
			if c.key == "fixed" {
				// open admits while degraded: the near band is never left
				if allowed != 25 {
					t.Fatalf("open: admitted %d of 25", allowed)
				}
			} else if allowed != c.wantAllow {
				t.Fatalf("admitted %d, want %d", allowed, c.wantAllow)
			}
			if degraded != c.wantDegrad || (c.wantDegrad && r.c.Stats.Degraded.Load() == 0) {
				t.Fatalf("degraded flag %v, stat %d", degraded, r.c.Stats.Degraded.Load())
			}
		})
	}
}

func TestAsyncEmissionMatchesAdmissions(t *testing.T) {
	r := newRig(t, Config{})
	var admitted uint64
	for i := range 300 {
		r.clk.ns.Add(int64(7 * time.Millisecond))
		key := []string{"fixed", "bucket", "envoy", "sliding"}[i%4]
		hits := int64(i%3 + 1)
		if d := r.check(t, hits, key, strconv.Itoa(i%5)); d.Allowed() {
			admitted += uint64(hits)
		}
		if i%10 == 0 {
			r.c.Flush(context.Background())
		}
	}
	if err := r.c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	seqs := map[uint64]bool{}
	for _, d := range r.prod.all {
		sum += d.AllowedCost
		if seqs[d.Sequence] {
			t.Fatalf("sequence %d emitted twice", d.Sequence)
		}
		seqs[d.Sequence] = true
	}
	if sum != admitted {
		t.Fatalf("allowed cost emitted %d, admitted %d", sum, admitted)
	}
}

func TestAsyncProducerFailureKeepsDeltas(t *testing.T) {
	r := newRig(t, Config{})
	r.check(t, 3, "fixed", "a")
	r.prod.fail = errors.New("kafka down")
	r.check(t, 2, "fixed", "a")
	if err := r.c.Flush(context.Background()); err == nil {
		t.Fatal("flush succeeded against a failing producer")
	}
	r.check(t, 1, "fixed", "a")
	r.prod.fail = nil
	if err := r.c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	last := uint64(0)
	for _, d := range r.prod.all {
		sum += d.AllowedCost
		if d.Sequence <= last {
			t.Fatalf("sequences out of order: %d after %d", d.Sequence, last)
		}
		last = d.Sequence
	}
	if sum != 6 {
		t.Fatalf("allowed cost emitted %d, want 6", sum)
	}
}

// TestAsyncTwoInstancesNoOvershoot: two checkers share a store through a
// lagging pipeline; with near_limit sync their combined admissions never
// exceed the limit.
func TestAsyncTwoInstancesNoOvershoot(t *testing.T) {
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms, hold: true}
	clk := &clock{}
	clk.ns.Store(t0)
	rules := ruleStore(t, asyncRules)
	a, _ := New(Config{InstanceName: "a"}, rules, ms, prod, clk)
	b, _ := New(Config{InstanceName: "b"}, rules, ms, prod, clk)
	admitted := 0
	for i := range 400 {
		clk.ns.Add(int64(time.Millisecond)) // 400 ms: one window of 20
		ch := a
		if i%2 == 1 {
			ch = b
		}
		var d Decision
		ch.Check(context.Background(), req(1, "fixed", "shared"), &d)
		if d.Allowed() {
			admitted++
		}
		if i%20 == 0 {
			a.Flush(context.Background())
			b.Flush(context.Background())
		}
		if i%50 == 0 { // the aggregator catches up with a lag
			prod.release()
			a.Refresh(context.Background())
			b.Refresh(context.Background())
		}
	}
	if admitted != 20 {
		t.Fatalf("two instances admitted %d in one window of limit 20", admitted)
	}
}

func TestAsyncKeyTableBounded(t *testing.T) {
	r := newRig(t, Config{MaxKeys: 1024, Shards: 16})
	for i := range 100_000 {
		r.check(t, 1, "nearasync", "attacker-"+strconv.Itoa(i))
		if i%5000 == 0 {
			r.c.Flush(context.Background())
		}
	}
	if n := r.c.Stats.Keys.Load(); n > 1024 {
		t.Fatalf("keys held %d, want <= 1024", n)
	}
	total := 0
	for i := range r.c.shards {
		total += r.c.shards[i].len()
	}
	if total > 1024 {
		t.Fatalf("table holds %d keys", total)
	}
	// consumption of evicted keys was not lost
	r.c.Flush(context.Background())
	var sum uint64
	for _, d := range r.prod.all {
		sum += d.AllowedCost
	}
	if sum != 100_000 {
		t.Fatalf("emitted %d admitted hits, want 100000", sum)
	}
}

func TestAsyncEvictedOverKeyStaysOver(t *testing.T) {
	r := newRig(t, Config{MaxKeys: 1, Shards: 1})
	for range 30 {
		r.check(t, 1, "closed", "victim")
	}
	if d := r.check(t, 1, "closed", "victim"); d.Allowed() {
		t.Fatal("not over")
	}
	r.check(t, 1, "closed", "other") // evicts the victim
	r.store.SetUnavailable(true)     // a re-created key would need the store
	if d := r.check(t, 1, "closed", "victim"); d.Allowed() || d.Statuses[0].Degraded {
		t.Fatalf("evicted over-limit key not refused from memory: %+v", d.Statuses[0])
	}
}

func TestAsyncIdleKeysEvicted(t *testing.T) {
	r := newRig(t, Config{IdleAfter: time.Minute})
	r.check(t, 1, "fixed", "idle")
	r.c.Flush(context.Background())
	r.clk.ns.Add(int64(10 * time.Minute))
	for range 3 { // the key is due within MaxRefresh; the refresher drops it
		r.c.Refresh(context.Background())
		r.clk.ns.Add(int64(5 * time.Second))
	}
	if n := r.c.Stats.Keys.Load(); n != 0 {
		t.Fatalf("idle key still held (%d keys)", n)
	}
}

func TestAsyncStartStopFlushes(t *testing.T) {
	r := newRig(t, Config{FlushInterval: time.Hour})
	r.c.Start(context.Background())
	r.check(t, 4, "fixed", "a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, d := range r.prod.all {
		sum += d.AllowedCost
	}
	if sum != 4 {
		t.Fatalf("stop flushed %d hits, want 4", sum)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	ms := counters.NewMemStore()
	rules := ruleStore(t, asyncRules)
	for i, cfg := range []Config{{Shards: 3}, {MaxKeys: 1, Shards: 4}, {MinRefresh: time.Hour, MaxRefresh: time.Second}, {SafetyPercent: 50}} {
		if _, err := New(cfg, rules, ms, &applyProducer{store: ms}, &clock{}); err == nil {
			t.Fatalf("config %d accepted", i)
		}
	}
	if _, err := New(Config{}, nil, ms, nil, nil); err == nil {
		t.Fatal("missing dependencies accepted")
	}
}

var _ = fmt.Sprint

const hotRules = `domain: api
descriptors:
  - key: hot
    algorithm: fixed_window
    shards: 4
    rate_limit: {unit: second, requests_per_unit: 100}
`

// TestHotKeyShards: each instance counts a hot key in its own shard; a
// refresh sums the other shards into what it knows of the others.
func TestHotKeyShards(t *testing.T) {
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	rules := ruleStore(t, hotRules)
	a, _ := New(Config{InstanceName: "a"}, rules, ms, prod, clk)
	var b *Checker
	for { // two instances on different shards
		b, _ = New(Config{InstanceName: "b"}, rules, ms, prod, clk)
		if b.shardOf(4) != a.shardOf(4) {
			break
		}
	}
	for range 30 {
		var d Decision
		a.Check(context.Background(), req(1, "hot", "x"), &d)
	}
	a.Flush(context.Background())
	for _, d := range prod.all {
		if d.CounterKey != counters.ShardKey("api:hot|hot=x", a.shardOf(4)) {
			t.Fatalf("delta to %q, want a's shard", d.CounterKey)
		}
	}
	var d Decision
	b.Check(context.Background(), req(0, "hot", "x"), &d) // creates b's entry
	clk.ns.Add(int64(60 * time.Millisecond))
	b.Refresh(context.Background())
	b.Check(context.Background(), req(0, "hot", "x"), &d)
	if d.Statuses[0].Remaining != 70 {
		t.Fatalf("b sees remaining %d, want 70 (a's 30 hits in another shard)", d.Statuses[0].Remaining)
	}
}

// TestEmissionInProportionToNeed: a key far from its limit holds its
// consumption up to MaxEmitInterval (one delta for a second of decisions
// instead of one per flush); a key whose held consumption could matter to
// another instance's band goes at the next flush; Flush emits everything.
func TestEmissionInProportionToNeed(t *testing.T) {
	r := newRig(t, Config{})
	ctx := context.Background()
	ms := int64(time.Millisecond)
	// in use past the young-key period, with store answers: far
	for range 10 {
		r.check(t, 1, "huge", "far")
		r.clk.ns.Add(50 * ms)
		r.c.Refresh(ctx)
	}
	r.c.Flush(ctx)
	before := len(r.prod.all)
	for step := range 19 { // 19 flush intervals of decisions: nothing is due
		r.clk.ns.Add(50 * ms)
		if d := r.check(t, 1, "huge", "far"); !d.Allowed() {
			t.Fatalf("step %d: refused far from the limit", step)
		}
		if err := r.c.flush(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.prod.all) - before; n != 0 {
		t.Fatalf("a far key emitted %d deltas within MaxEmitInterval, want 0 (then 1)", n)
	}
	if keys, lazy, _ := r.c.Queue(); keys != 1 || lazy != 1 {
		t.Fatalf("queue: %d keys, %d lazy; want 1 and 1", keys, lazy)
	}
	r.clk.ns.Add(100 * ms)
	r.c.flush(ctx, false)
	if n := len(r.prod.all) - before; n != 1 || r.prod.all[before].CountedCost != 19 || r.prod.all[before].AlreadyApplied {
		t.Fatalf("after MaxEmitInterval: %d deltas (%v), want one of 19 hits decided in memory", n, r.prod.all[before:])
	}
	// a key decided into its near band goes at once (its charges already
	// folded everything into the store); a key whose held hits exceed
	// the allowance goes at the next flush
	before = len(r.prod.all)
	r.clk.ns.Add(10 * ms)
	r.check(t, 950, "huge", "far") // 950 of 1000 in one decision: too much to hold
	r.c.flush(ctx, false)
	if n := len(r.prod.all) - before; n != 1 {
		t.Fatalf("a decision that leaves the far band: %d deltas at the next flush, want 1", n)
	}
	// Flush emits lazy keys too
	r.clk.ns.Add(10 * ms)
	r.check(t, 0, "huge", "probe") // a probe: analytics only, lazy
	before = len(r.prod.all)
	r.c.Flush(ctx)
	if n := len(r.prod.all) - before; n != 1 {
		t.Fatalf("Flush emitted %d deltas, want the lazy one", n)
	}
	if keys, lazy, _ := r.c.Queue(); keys != 0 || lazy != 0 {
		t.Fatalf("after Flush: %d keys, %d lazy queued", keys, lazy)
	}
}

// TestIdleKeysAreParked: a key decided once (a per-IP front's usual key)
// costs its one store charge and no refresh reads afterwards, window after
// window; used again, its stale view makes that decision a store charge.
func TestIdleKeysAreParked(t *testing.T) {
	r := newRig(t, Config{})
	ctx := context.Background()
	ms := int64(time.Millisecond)
	r.check(t, 1, "big", "once")
	if got := r.store.charges.Load(); got != 1 {
		t.Fatalf("first decision: %d charges, want 1", got)
	}
	reads := r.store.reads.Load()
	for range 60 { // 3 s of refresher passes over per-second windows
		r.clk.ns.Add(50 * ms)
		r.c.Refresh(ctx)
	}
	if got := r.store.reads.Load() - reads; got != 0 {
		t.Fatalf("an idle key was read %d times", got)
	}
	// used again: near (a charge), then the refresher reads it as usual
	r.check(t, 1, "big", "once")
	if got := r.store.charges.Load(); got != 2 {
		t.Fatalf("decision on a parked key: %d charges in all, want 2", got)
	}
	for range 4 {
		r.clk.ns.Add(50 * ms)
		r.check(t, 1, "big", "once")
		r.c.Refresh(ctx)
	}
	if got := r.store.reads.Load() - reads; got == 0 {
		t.Fatal("a key in use again is not refreshed")
	}
	// past idle_after it is dropped
	r.clk.ns.Add(int64(3 * time.Minute))
	r.c.Flush(ctx)
	r.c.Refresh(ctx)
	r.clk.ns.Add(int64(3 * time.Minute))
	r.c.Refresh(ctx)
	if n := r.c.Snapshot().Keys; n != 0 {
		t.Fatalf("%d keys left after idle_after", n)
	}
}

// TestMaxBytesBoundsTheTable: the key table's bound in bytes becomes a
// bound in keys (KeyBytes each), the smaller of the two winning.
func TestMaxBytesBoundsTheTable(t *testing.T) {
	ms := counters.NewMemStore()
	for i, c := range []struct {
		maxKeys  int
		maxBytes int64
		want     int
	}{
		{0, 0, 1 << 20},
		{0, 1024 * KeyBytes, 1024},
		{512, 1024 * KeyBytes, 512},
		{4096, 0, 4096},
	} {
		ch, err := New(Config{MaxKeys: c.maxKeys, MaxBytes: c.maxBytes, Shards: 4}, ruleStore(t, asyncRules), ms, &applyProducer{store: ms}, &clock{})
		if err != nil {
			t.Fatal(err)
		}
		if ch.cfg.MaxKeys != c.want {
			t.Fatalf("step %d: max keys %d, want %d", i, ch.cfg.MaxKeys, c.want)
		}
	}
}

// TestSlicesNeverSumAboveWhatRemained: for any fleet whose views of the
// rates agree, the slices cut from what remained add up to at most it;
// cold slices (the ceiling divided by the live checkers) add up to at
// most the ceiling; no instance gets nothing while something remains for
// n or more.
func TestSlicesNeverSumAboveWhatRemained(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(2, 16).Draw(rt, "instances")
		remaining := rapid.Int64Range(0, 1<<40).Draw(rt, "remaining")
		rates := make([]int64, n)
		var fleet int64
		for i := range rates {
			rates[i] = rapid.Int64Range(0, 1<<30).Draw(rt, "rate")
			fleet += rates[i]
		}
		var sum int64
		for i := range rates {
			s := cut(remaining, int64(n), rates[i], fleet)
			if s < 0 || (remaining >= int64(2*n) && s == 0) {
				rt.Fatalf("instance %d: slice %d of %d", i, s, remaining)
			}
			sum += s
		}
		if sum > remaining {
			rt.Fatalf("%d slices add up to %d, above the %d that remained (rates %v)", n, sum, remaining, rates)
		}
		if cold := (remaining / int64(n)) * int64(n); cold > remaining {
			rt.Fatalf("cold slices %d above %d", cold, remaining)
		}
	})
}

// offsetClock reads another clock plus a fixed offset (a checker whose
// clock runs ahead of the store's).
type offsetClock struct {
	base *clock
	off  int64
}

func (c offsetClock) Now() int64 { return c.base.Now() + c.off }

// TestSkewedClockOpensNoEarlyWindow: a checker whose clock runs 5 s ahead
// of the store's learns the store's time from its heartbeat and decides
// within MaxClockSkew of it: the per-second window it exhausted stays
// exhausted until the store's clock (± the skew) leaves it. Without the
// clamp it would already count in a window 5 s ahead.
func TestSkewedClockOpensNoEarlyWindow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxSkew   time.Duration
		wantEarly bool
	}{{"clamped", 100 * time.Millisecond, false}, {"not clamped", time.Hour, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ms := counters.NewMemStore()
			store := &clock{}
			store.ns.Store(t0 + int64(500*time.Millisecond)) // mid-window on the store's clock
			ms.SetClock(store)
			c, err := New(Config{MaxClockSkew: tc.maxSkew}, ruleStore(t, asyncRules), ms, &applyProducer{store: ms},
				offsetClock{store, int64(4700 * time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.heartbeat(context.Background()); err != nil {
				t.Fatal(err)
			}
			if live, skew, _ := c.Fleet(); live != 1 || skew != -4700*time.Millisecond {
				t.Fatalf("fleet: %d live, skew %v; want 1 and -4.7s", live, skew)
			}
			if tc.wantEarly {
				// the unclamped checker decides in its own future window
				if got := windowStart(c.clock.Now(), int64(time.Second)); got == t0 {
					t.Fatal("the unclamped clock is in the store's window")
				}
				return
			}
			admitted := 0
			for range 30 {
				if d := (&rig{c: c, clk: store}).check(t, 1, "fixed", "k"); d.Allowed() {
					admitted++
				}
			}
			if admitted != 20 {
				t.Fatalf("admitted %d of 20 in the store's window", admitted)
			}
			store.ns.Add(int64(350 * time.Millisecond)) // store t0+850ms: the checker within 100 ms of it
			if d := (&rig{c: c, clk: store}).check(t, 1, "fixed", "k"); d.Allowed() {
				t.Fatalf("a new window opened %v early", time.Duration(t0+int64(time.Second)-store.ns.Load()))
			}
			store.ns.Add(int64(100 * time.Millisecond)) // store t0+950ms: within the skew of the boundary
			store.ns.Add(int64(100 * time.Millisecond)) // store t0+1.05s: the next window
			if d := (&rig{c: c, clk: store}).check(t, 1, "fixed", "k"); !d.Allowed() {
				t.Fatal("the store's next window did not open")
			}
		})
	}
}

// TestSliceNotRecutFromAStalledPipeline: three checkers with near_limit:
// async while the pipeline delivers nothing (an aggregator still joining
// its group). Their cold slices add up to the limit; store answers that do
// not hold what a checker had counted a pipeline lag after its cut must
// not re-cut the slices (each would take a third of the whole limit
// again). Once the pipeline delivers, slices are re-cut from what truly
// remains, and the window's total stays within the limit.
func TestSliceNotRecutFromAStalledPipeline(t *testing.T) {
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	prod := &applyProducer{store: ms, hold: true}
	rules := ruleStore(t, `domain: api
descriptors:
  - key: k
    algorithm: fixed_window
    near_limit: async
    rate_limit: {unit: minute, requests_per_unit: 300}
`)
	var cs []*Checker
	for _, name := range []string{"a", "b", "c"} {
		c, err := New(Config{InstanceName: name}, rules, ms, prod, clk)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		if err := c.heartbeat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		_ = c.heartbeat(context.Background()) // every one sees three
	}
	admitted := 0
	step := func(n int) {
		for i := range n {
			clk.ns.Add(int64(time.Millisecond))
			var d Decision
			if err := cs[i%3].Check(context.Background(), req(1, "k", "x"), &d); err != nil {
				t.Fatal(err)
			}
			if d.Allowed() {
				admitted++
			}
			if i%25 == 0 {
				for _, c := range cs {
					c.Flush(context.Background())
					c.Refresh(context.Background())
				}
			}
		}
	}
	step(3000) // 3 s of a stalled pipeline: many refreshes, none holding anyone's hits
	if admitted > 300 {
		for _, c := range cs {
			sn := c.Snapshot()
			t.Logf("%s: far %d near %d over %d", c.instance, sn.FarBand, sn.NearBand, sn.OverBand)
		}
		t.Fatalf("with the pipeline stalled three checkers admitted %d of 300", admitted)
	}
	stalled := admitted
	prod.hold = false
	prod.release()
	step(3000)
	if admitted > 300 || admitted < stalled {
		t.Fatalf("after the pipeline caught up: %d admitted in the window (limit 300; %d while stalled)", admitted, stalled)
	}
	t.Logf("admitted %d while the pipeline stalled, %d in the window", stalled, admitted)
}
