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

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// applyProducer hands every delta straight to a counters.MemStore, as an aggregator
// with no lag would; it also records what it saw.
type applyProducer struct {
	mu     sync.Mutex
	store  *counters.MemStore
	hold   bool // keep deltas instead of applying (pipeline lag)
	held   []*eventsv1.Delta
	all    []*eventsv1.Delta
	calls  int // Produce calls
	fail   error
	closed bool
}

func (p *applyProducer) Produce(_ context.Context, ds []*eventsv1.Delta) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.calls++
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
	return newRigRules(t, cfg, asyncRules)
}

// newRigRules is newRig over the rules of rules.
func newRigRules(t testing.TB, cfg Config, rules string) *rig {
	t.Helper()
	ms := counters.NewMemStore()
	cs := &countingStore{MemStore: ms}
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(cfg, ruleStore(t, rules), cs, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, store: cs, prod: prod, clk: clk}
}

func (r *rig) check(t testing.TB, hits int64, kv ...string) ratelimit.Decision {
	t.Helper()
	var d ratelimit.Decision
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
		var d ratelimit.Decision
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
	r := newRig(t, Config{CheckerConfig: config.CheckerConfig{MaxKeys: 1024}, Shards: 16})
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
	r := newRig(t, Config{CheckerConfig: config.CheckerConfig{MaxKeys: 1}, Shards: 1})
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
	r := newRig(t, Config{CheckerConfig: config.CheckerConfig{IdleAfter: time.Minute}})
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
	r := newRig(t, Config{CheckerConfig: config.CheckerConfig{FlushInterval: time.Hour}})
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
	for i, cfg := range []Config{{Shards: 3}, {CheckerConfig: config.CheckerConfig{MaxKeys: 1}, Shards: 4},
		{CheckerConfig: config.CheckerConfig{MinRefresh: time.Hour, MaxRefresh: time.Second}}, {CheckerConfig: config.CheckerConfig{SafetyPercent: 50}}} {
		if _, err := New(cfg, rules, ms, &applyProducer{store: ms}, &clock{}); err == nil {
			t.Fatalf("config %d accepted", i)
		}
	}
	if _, err := New(Config{}, nil, ms, nil, nil); err == nil {
		t.Fatal("missing dependencies accepted")
	}
}

var _ = fmt.Sprint
