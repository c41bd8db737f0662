package checker_test

// The engines side by side: the async checker against local.Engine, the
// exact single-process engine (an external test, because local imports
// checker).

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
	"github.com/velvetrope/velvetrope/ratelimit"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) Now() int64 { return c.ns.Load() }

// t0 is aligned to a day, so Envoy windows start at t0.
const t0 = int64(1_700_006_400) * 1e9

// applyProducer hands every delta straight to a counters.MemStore, as an
// aggregator with no lag would, and records what it saw.
type applyProducer struct {
	mu    sync.Mutex
	store *counters.MemStore
	all   []*eventsv1.Delta
}

func (p *applyProducer) Produce(_ context.Context, ds []*eventsv1.Delta) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = append(p.all, ds...)
	for _, d := range ds {
		p.store.Apply(0, d)
	}
	return nil
}

func (p *applyProducer) Close(context.Context) error { return nil }

type rig struct {
	c    *checker.Checker
	prod *applyProducer
	clk  *clock
}

// newRig is one async checker over checker.AsyncRules on a MemStore.
func newRig(t testing.TB, cfg checker.Config) *rig {
	t.Helper()
	f, err := config.ParseRules("rules.yaml", []byte(checker.AsyncRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := checker.New(cfg, config.NewStore(rs), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, prod: prod, clk: clk}
}

func req(hits int64, kv ...string) *ratelimit.Request {
	r := &ratelimit.Request{Domain: "api", Hits: hits}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, ratelimit.Descriptor{Entries: []config.Entry{{Key: kv[i], Value: kv[i+1]}}})
	}
	return r
}

func codes(d ratelimit.Decision) string {
	s := d.Code.String() + ":"
	for _, st := range d.Statuses {
		s += " " + st.Code.String()
	}
	return s
}

func remainings(d ratelimit.Decision) []int64 {
	var out []int64
	for _, s := range d.Statuses {
		out = append(out, s.Remaining)
	}
	return out
}

// TestAsyncSingleInstanceIsExact drives one async checker and the exact
// local engine with the same random requests, times, flushes and refreshes:
// with one instance every decision must be the same (no overshoot, no
// under-admission), for every algorithm and band.
func TestAsyncSingleInstanceIsExact(t *testing.T) {
	keys := []string{"envoy", "fixed", "sliding", "bucket", "gcra", "leaky", "soft", "syncmode", "nearasync", "local",
		"shadow", "envoyshadow", "free", "old", "new", "nothing"}
	rapid.Check(t, func(rt *rapid.T) {
		r := newRig(t, checker.Config{})
		rs := r.c.Rules()
		k, _ := limiter.NewKeyed(limiter.WithClock(r.clk))
		exact, _ := local.New(config.NewStore(rs), k, r.clk, 0)
		// Analytics: every decision of a counted key reaches the deltas
		// exactly once (allowed, denied or shadow-denied), and the minute
		// rows they carry add up to the same.
		counted := map[string]bool{"envoy": true, "fixed": true, "sliding": true, "bucket": true, "gcra": true,
			"leaky": true, "soft": true, "syncmode": true, "nearasync": true, "shadow": true, "envoyshadow": true}
		decisions := map[string]uint64{}
		for i := range rapid.IntRange(1, 120).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				r.clk.ns.Add(rapid.Int64Range(0, 1500e6).Draw(rt, "dt"))
			case 1:
				r.c.Flush(context.Background())
			case 2:
				r.c.Refresh(context.Background())
			default:
				n := rapid.IntRange(1, 3).Draw(rt, "descriptors")
				var kv []string
				for range n {
					kv = append(kv, rapid.SampledFrom(keys).Draw(rt, "key"), strconv.Itoa(rapid.IntRange(0, 1).Draw(rt, "value")))
				}
				hits := rapid.Int64Range(0, 12).Draw(rt, "hits")
				q := req(hits, kv...)
				for j := range q.Descriptors { // Envoy's per-descriptor hits_addend, sometimes
					if rapid.IntRange(0, 3).Draw(rt, "own hits?") == 0 {
						q.Descriptors[j].Hits, q.Descriptors[j].HasHits = rapid.Int64Range(0, 12).Draw(rt, "own hits"), true
					}
				}
				var da, dl ratelimit.Decision
				if err := r.c.Check(context.Background(), q, &da); err != nil {
					rt.Fatal(err)
				}
				if err := exact.Check(context.Background(), q, &dl); err != nil {
					rt.Fatal(err)
				}
				rt.Logf("step %d %v hits %d: async %s %v | exact %s %v", i, kv, hits, codes(da), remainings(da), codes(dl), remainings(dl))
				if da.Code != dl.Code {
					rt.Fatalf("step %d %v hits %d: async %s, exact %s (%+v vs %+v)", i, kv, hits, codes(da), codes(dl), da.Statuses, dl.Statuses)
				}
				seen := map[string]bool{}
				for j, d := range q.Descriptors {
					desc := d.Entries[0].Key + "=" + d.Entries[0].Value
					if counted[d.Entries[0].Key] && q.HitsOf(j) > 0 && !seen[desc] {
						seen[desc] = true
					}
				}
				zero := false
				for j := range q.Descriptors {
					zero = zero || q.HitsOf(j) == 0
				}
				for desc := range seen {
					if !zero { // probes are left out of the accounting
						decisions[desc]++
					}
				}
				if zero { // probes count as decisions too, but this accounting leaves their keys out
					for _, d := range q.Descriptors {
						delete(counted, d.Entries[0].Key)
					}
				}
				for j := range da.Statuses {
					a, l := da.Statuses[j], dl.Statuses[j]
					if a.Code != l.Code || a.Remaining != l.Remaining || a.RetryNever != l.RetryNever || a.Shadowed != l.Shadowed || a.OverSoft != l.OverSoft {
						rt.Fatalf("step %d %v hits %d status %d: async %+v, exact %+v", i, kv, hits, j, a, l)
					}
				}
			}
		}
		if err := r.c.Flush(context.Background()); err != nil {
			rt.Fatal(err)
		}
		got := map[string]uint64{}
		rows := map[[2]any]*eventsv1.MinuteUsage{} // the newest row per (stream, minute)
		for _, d := range r.prod.all {
			got[d.DescriptorText] += d.AllowedCount + d.DeniedCount + d.ShadowDeniedCount
			if m := d.Minute; m != nil {
				rows[[2]any{m.Stream, m.MinuteUnix}] = m
			}
		}
		fromRows := map[string]uint64{}
		for _, d := range r.prod.all {
			if m := d.Minute; m != nil && rows[[2]any{m.Stream, m.MinuteUnix}] == m {
				fromRows[d.DescriptorText] += m.AllowedCount + m.DeniedCount + m.ShadowDeniedCount
			}
		}
		for desc, n := range decisions {
			if !counted[desc[:strings.IndexByte(desc, '=')]] {
				continue
			}
			if got[desc] != n || fromRows[desc] != n {
				rt.Fatalf("%s: %d decisions, deltas count %d, minute rows %d", desc, n, got[desc], fromRows[desc])
			}
		}
	})
}

// engines returns both engines over asyncRules, with request ids
// remembered for a minute, and a function that advances their clock.
func engines(t *testing.T) map[string]struct {
	check   func(*ratelimit.Request, *ratelimit.Decision) error
	advance func(time.Duration)
} {
	t.Helper()
	r := newRig(t, checker.Config{IdempotencyTTL: time.Minute})
	lclk := &clock{}
	lclk.ns.Store(t0)
	k, _ := limiter.NewKeyed(limiter.WithClock(lclk))
	l, err := local.New(config.NewStore(r.c.Rules()), k, lclk, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]struct {
		check   func(*ratelimit.Request, *ratelimit.Decision) error
		advance func(time.Duration)
	}{
		"async": {func(q *ratelimit.Request, d *ratelimit.Decision) error { return r.c.Check(context.Background(), q, d) },
			func(d time.Duration) { r.clk.ns.Add(int64(d)) }},
		"local": {func(q *ratelimit.Request, d *ratelimit.Decision) error { return l.Check(context.Background(), q, d) },
			func(d time.Duration) { lclk.ns.Add(int64(d)) }},
	}
}

// TestRequestIDBoundToItsRequest: issue 10, item 2. Before, the replay
// cache was keyed by (domain, id) alone, so the same id with a million
// hits, or with another user's descriptor, got the first answer, uncharged.
func TestRequestIDBoundToItsRequest(t *testing.T) {
	for name, e := range engines(t) {
		t.Run(name, func(t *testing.T) {
			key := "fixed"
			first := req(1, key, "alice")
			first.RequestID = "r1"
			other := func(mod func(*ratelimit.Request)) *ratelimit.Request {
				q := req(1, key, "alice")
				q.RequestID = "r1"
				mod(q)
				return q
			}
			steps := []struct {
				name     string
				q        *ratelimit.Request
				conflict bool
			}{
				{"first use", first, false},
				{"a retry of the same request", first, false},
				{"the same id with more hits", other(func(q *ratelimit.Request) { q.Hits = 1000000 }), true},
				{"the same id for another user", other(func(q *ratelimit.Request) { q.Descriptors[0].Entries[0].Value = "mallory" }), true},
				{"the same id with a descriptor's own hits", other(func(q *ratelimit.Request) { q.Descriptors[0].Hits, q.Descriptors[0].HasHits = 1, true }), true},
				{"the same id with one more descriptor", other(func(q *ratelimit.Request) {
					q.Descriptors = append(q.Descriptors, ratelimit.Descriptor{Entries: []config.Entry{{Key: key, Value: "bob"}}})
				}), true},
				{"another id", other(func(q *ratelimit.Request) { q.RequestID = "r2" }), false},
			}
			var firstAnswer ratelimit.Decision
			for i, s := range steps {
				var d ratelimit.Decision
				err := e.check(s.q, &d)
				if s.conflict {
					var fe *ratelimit.FieldError
					if !errors.Is(err, ratelimit.ErrRequestIDConflict) || !errors.As(err, &fe) || fe.Field != "request_id" {
						t.Fatalf("step %d (%s): got %v, want a request_id conflict", i, s.name, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, s.name, err)
				}
				if i == 0 {
					firstAnswer = d
				}
				if i == 1 && (d.Code != firstAnswer.Code || d.Statuses[0].Remaining != firstAnswer.Statuses[0].Remaining) {
					t.Fatalf("retry: got %+v, want the first answer %+v", d.Statuses[0], firstAnswer.Statuses[0])
				}
			}
			e.advance(2 * time.Minute) // past the TTL the id is free again
			var d ratelimit.Decision
			if err := e.check(other(func(q *ratelimit.Request) { q.Hits = 2 }), &d); err != nil {
				t.Fatalf("after the TTL: %v", err)
			}
		})
	}
}

// TestBounds: issue 10, item 5. Before, a 600 KB value was accepted and
// made a delta neither the aggregator nor the broker would take.
func TestBounds(t *testing.T) {
	for name, e := range engines(t) {
		t.Run(name, func(t *testing.T) {
			many := &ratelimit.Request{Domain: "api", Hits: 1}
			for range 17 {
				many.Descriptors = append(many.Descriptors, ratelimit.Descriptor{Entries: []config.Entry{{Key: "user_id", Value: "x"}}})
			}
			wide := req(1, "user_id", "x")
			for range 8 {
				wide.Descriptors[0].Entries = append(wide.Descriptors[0].Entries, config.Entry{Key: "k", Value: "v"})
			}
			longID := req(1, "user_id", "x")
			longID.RequestID = strings.Repeat("i", 129)
			cases := []struct {
				name, field string
				q           *ratelimit.Request
			}{
				{"a 600 KB value", "descriptors[0].entries[0].value", req(1, "user_id", strings.Repeat("v", 600<<10))},
				{"a value one byte above the bound", "descriptors[1].entries[0].value", req(1, "user_id", "ok", "user_id", strings.Repeat("v", 1025))},
				{"a long key", "descriptors[0].entries[0].key", req(1, strings.Repeat("k", 129), "v")},
				{"a value that is not UTF-8", "descriptors[0].entries[0].value", req(1, "user_id", "\xff\xfe")},
				{"17 descriptors", "descriptors", many},
				{"9 entries", "descriptors[0].entries", wide},
				{"a long request id", "request_id", longID},
			}
			for i, c := range cases {
				var d ratelimit.Decision
				err := e.check(c.q, &d)
				var fe *ratelimit.FieldError
				if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ratelimit.ErrBadRequest) {
					t.Fatalf("step %d (%s): got %v, want a bad request naming %s", i, c.name, err, c.field)
				}
			}
			var d ratelimit.Decision
			if err := e.check(req(1, "user_id", strings.Repeat("v", 1024)), &d); err != nil {
				t.Fatalf("a value at the bound: %v", err)
			}
		})
	}
}

const elasticRules = `domain: shop
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 10}
descriptors:
  - key: tenant
    algorithm: fixed_window
    throttle: {type: elastic, pool: shared, max_multiplier: 3}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user_id
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://orders.internal:8080"}
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// TestElasticAndDeferOnBothEngines: an elastic tenant with limit 5 and a
// pool of 10 (max_multiplier 3) admits 15, the last 10 borrowed; another
// tenant then admits only its own 5. A deferring rule's refusal is
// Deferred, charged nothing, and a release's refusal is OverLimit.
func TestElasticAndDeferOnBothEngines(t *testing.T) {
	f, err := config.ParseRules("shop.yaml", []byte(elasticRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"async", "local"} {
		t.Run(name, func(t *testing.T) {
			clk := &clock{}
			clk.ns.Store(t0)
			check := engineCheck(t, name, rs, clk)
			run := func(n int, kv ...string) (admitted, elastic int, last ratelimit.Decision) {
				for range n {
					q := req(1, kv...)
					q.Domain = "shop"
					var d ratelimit.Decision
					if err := check(q, &d); err != nil {
						t.Fatal(err)
					}
					if d.Allowed() {
						admitted++
						if d.Statuses[0].Elastic {
							elastic++
						}
					}
					last = d
				}
				return
			}
			if a, e, last := run(20, "tenant", "a"); a != 15 || e != 10 || last.Code != ratelimit.OverLimit {
				t.Fatalf("tenant a: admitted %d (%d borrowed), last %v; want 15 (10 borrowed), then refused", a, e, last.Code)
			}
			if a, e, _ := run(10, "tenant", "b"); a != 5 || e != 0 {
				t.Fatalf("tenant b: admitted %d (%d borrowed); want its own 5 (the pool is spent)", a, e)
			}
			if a, _, last := run(3, "user_id", "u"); a != 2 || last.Code != ratelimit.Deferred || last.Statuses[0].Code != ratelimit.Deferred ||
				last.Statuses[0].RetryAfter <= 0 {
				t.Fatalf("defer: admitted %d, last %+v; want 2 admitted, then deferred with a retry_after", a, last)
			}
			q := req(1, "user_id", "u")
			q.Domain, q.Release = "shop", true
			var d ratelimit.Decision
			if err := check(q, &d); err != nil || d.Code != ratelimit.OverLimit {
				t.Fatalf("a release over the limit: %v %v, want OverLimit", d.Code, err)
			}
			clk.ns.Add(int64(time.Minute)) // the next window: a release passes
			if err := check(q, &d); err != nil || d.Code != ratelimit.OK {
				t.Fatalf("a release in the next window: %v %v", d.Code, err)
			}
		})
	}
}

// TestElasticBorrowingJudgedByTheStore: two checkers on one store, the
// requests of a tenant alternating between them. Each checker's view of
// the tenant's own counter lags the other's charges, so the view cannot
// say which admission goes over the tenant's limit: the store's answer
// does, and the pool is charged for exactly those. The tenant admits its
// 5 and the pool's 10; the next tenant only its own 5 (before: 7).
func TestElasticBorrowingJudgedByTheStore(t *testing.T) {
	f, err := config.ParseRules("shop.yaml", []byte(elasticRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.ns.Store(t0)
	ms := counters.NewMemStore()
	ms.SetClock(clk)
	var cs []*checker.Checker
	for i := range 2 {
		c, err := checker.New(checker.Config{InstanceName: "c" + strconv.Itoa(i)}, config.NewStore(rs), ms, &applyProducer{store: ms}, clk)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	run := func(n int, tenant string) (admitted, borrowed int) {
		for i := range n {
			q := req(1, "tenant", tenant)
			q.Domain = "shop"
			var d ratelimit.Decision
			if err := cs[i%2].Check(context.Background(), q, &d); err != nil {
				t.Fatal(err)
			}
			if d.Allowed() {
				admitted++
				if d.Statuses[0].Elastic {
					borrowed++
				}
			}
		}
		return
	}
	if a, b := run(40, "a"); a != 15 || b != 10 {
		t.Fatalf("tenant a: admitted %d, %d borrowed; want 15 and 10", a, b)
	}
	if a, b := run(40, "b"); a != 5 || b != 0 {
		t.Fatalf("tenant b: admitted %d, %d borrowed; want its own 5", a, b)
	}
}

// TestPoolPaysOnlyWhatIsAboveTheLimit: an elastic tenant (limit 5, pool
// 10) whose requests cross its limit borrows from the pool only the hits
// beyond it, on both engines and for both algorithms elastic rules take:
// after tenant a has gone 2 over its limit, in one request or several,
// tenant b still borrows the pool's other 8 (it admits its own 5 and 8
// more). Before, the crossing request charged all its hits to the pool.
func TestPoolPaysOnlyWhatIsAboveTheLimit(t *testing.T) {
	seqs := []struct {
		name string
		hits []int64
	}{
		{"one request of 7", []int64{7}},
		{"5 then 2", []int64{5, 2}},
		{"3 then 4", []int64{3, 4}},
		{"1, 5, 1", []int64{1, 5, 1}},
	}
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		rules := strings.Replace(elasticRules, "algorithm: fixed_window\n    throttle", "algorithm: "+alg+"\n    throttle", 1)
		f, err := config.ParseRules("shop.yaml", []byte(rules))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := config.Compile([]*config.File{f})
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		for _, engine := range []string{"async", "local"} {
			for _, seq := range seqs {
				t.Run(alg+"/"+engine+"/"+seq.name, func(t *testing.T) {
					clk := &clock{}
					clk.ns.Store(t0)
					check := engineCheck(t, engine, rs, clk)
					for i, h := range seq.hits {
						q := req(h, "tenant", "a")
						q.Domain = "shop"
						var d ratelimit.Decision
						if err := check(q, &d); err != nil {
							t.Fatal(err)
						}
						if !d.Allowed() {
							t.Fatalf("tenant a's request %d (%d hits) refused: %+v", i, h, d)
						}
					}
					admitted, borrowed := 0, 0
					for range 20 {
						q := req(1, "tenant", "b")
						q.Domain = "shop"
						var d ratelimit.Decision
						if err := check(q, &d); err != nil {
							t.Fatal(err)
						}
						if d.Allowed() {
							admitted++
							if d.Statuses[0].Elastic {
								borrowed++
							}
						}
					}
					if admitted != 13 || borrowed != 8 {
						t.Fatalf("tenant b admitted %d (%d borrowed); want 13 (8 borrowed: the pool paid 2 for tenant a)", admitted, borrowed)
					}
				})
			}
		}
	}
}

// TestRefusedRequestsBorrowNothing: an elastic rule over its own limit in
// a request another rule refuses borrowed nothing (the pool is not
// charged), so its status must not say elastic — it did on both engines,
// and with it the RateLimit-Elastic header and decision="elastic".
func TestRefusedRequestsBorrowNothing(t *testing.T) {
	f, err := config.ParseRules("shop.yaml", []byte(elasticRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	for _, engine := range []string{"async", "local"} {
		t.Run(engine, func(t *testing.T) {
			clk := &clock{}
			clk.ns.Store(t0)
			check := engineCheck(t, engine, rs, clk)
			ask := func(kv ...string) ratelimit.Decision {
				q := req(1, kv...)
				q.Domain, q.NoDefer = "shop", true
				var d ratelimit.Decision
				if err := check(q, &d); err != nil {
					t.Fatal(err)
				}
				return d
			}
			for range 5 {
				ask("tenant", "a") // its own limit spent
			}
			for range 2 {
				ask("user_id", "u")
			}
			d := ask("tenant", "a", "user_id", "u")
			if d.Code != ratelimit.OverLimit || d.Statuses[0].Elastic {
				t.Fatalf("refused by user_id: %v, tenant's status %+v; want refused, not elastic", d.Code, d.Statuses[0])
			}
			if d := ask("tenant", "a"); !d.Allowed() || !d.Statuses[0].Elastic {
				t.Fatalf("alone: %v %+v; want admitted by borrowing", d.Code, d.Statuses[0])
			}
		})
	}
}

// engineCheck is the Check of one engine over rs on clk: "async", the
// async checker over a MemStore its deltas reach at once, or "local",
// the exact engine.
func engineCheck(t *testing.T, engine string, rs *config.RuleSet, clk *clock) func(*ratelimit.Request, *ratelimit.Decision) error {
	t.Helper()
	if engine == "async" {
		ms := counters.NewMemStore()
		ms.SetClock(clk)
		c, err := checker.New(checker.Config{}, config.NewStore(rs), ms, &applyProducer{store: ms}, clk)
		if err != nil {
			t.Fatal(err)
		}
		return func(q *ratelimit.Request, d *ratelimit.Decision) error { return c.Check(context.Background(), q, d) }
	}
	k, _ := limiter.NewKeyed(limiter.WithClock(clk))
	l, err := local.New(config.NewStore(rs), k, clk, 0)
	if err != nil {
		t.Fatal(err)
	}
	return func(q *ratelimit.Request, d *ratelimit.Decision) error { return l.Check(context.Background(), q, d) }
}
