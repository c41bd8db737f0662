package plantable

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/velvetrope/velvetrope/config"
)

// TestTableMatchesAMap: random batches of sets and removes, on a table
// written in place and then copied on write, leave it holding exactly
// what a map holds; keys crowd into few shards (low shard bits), so
// probes wrap, removals shift and shards grow and shrink.
func TestTableMatchesAMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		tb := New()
		model := map[uint64]string{}
		plans := []string{"", "free", "pro", "ent"}
		for round := 0; round < 60; round++ {
			if round == 30 {
				tb.Publish()
			}
			var batch []Change
			for i := rng.IntN(400); i > 0; i-- {
				// 3 shards, keys dense in the low bits
				k := uint64(rng.IntN(3))<<(64-shardBits) | uint64(rng.IntN(300)) | 1<<20
				if rng.IntN(50) == 0 {
					k = 0 // the free mark: stored as 1
				}
				batch = append(batch, Change{Key: k, Plan: plans[rng.IntN(len(plans))]})
			}
			if err := tb.Apply(batch); err != nil {
				t.Fatal(err)
			}
			for _, c := range batch {
				k := max(c.Key, 1)
				if c.Plan == "" {
					delete(model, k)
				} else {
					model[k] = c.Plan
				}
			}
			if tb.Len() != int64(len(model)) {
				t.Fatalf("seed %d round %d: %d clients, the map has %d", seed, round, tb.Len(), len(model))
			}
			for k := uint64(0); k < 3; k++ {
				for v := uint64(0); v < 300; v++ {
					key := k<<(64-shardBits) | v | 1<<20
					got, ok := tb.Plan(key)
					if want, in := model[key]; ok != in || got != want {
						t.Fatalf("seed %d round %d: key %x: %q %v, the map says %q %v", seed, round, key, got, ok, want, in)
					}
				}
			}
			if got, ok := tb.Plan(1); got != model[1] || ok != (model[1] != "") {
				t.Fatalf("seed %d round %d: key 0 → %q %v, want %q", seed, round, got, ok, model[1])
			}
		}
	}
}

// TestPublishedShardsNeverChange: a reader holding a published shard
// sees it unchanged, whatever is written after (run with -race).
func TestPublishedShardsNeverChange(t *testing.T) {
	tb := New()
	var keys []uint64
	for i := range 5000 {
		keys = append(keys, tb.Key([]string{strconv.Itoa(i)}))
	}
	var batch []Change
	for _, k := range keys {
		batch = append(batch, Change{Key: k, Plan: "a"})
	}
	if err := tb.Apply(batch); err != nil {
		t.Fatal(err)
	}
	tb.Publish()
	var stop atomic.Bool
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for _, k := range keys[:1000] { // never changed below
					if p, ok := tb.Plan(k); !ok || p != "a" {
						wrong.Add(1)
					}
				}
			}
		}()
	}
	for round := 0; round < 200; round++ {
		var b []Change
		for _, k := range keys[1000:] {
			if (int(k)+round)%7 == 0 {
				b = append(b, Change{Key: k, Plan: []string{"", "b", "c"}[round%3]})
			}
		}
		if err := tb.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if wrong.Load() != 0 {
		t.Fatalf("%d lookups of unchanged clients missed while others changed", wrong.Load())
	}
}

func TestTooManyPlans(t *testing.T) {
	tb := New()
	var b []Change
	for i := 0; i < MaxPlans; i++ {
		b = append(b, Change{Key: uint64(i + 1), Plan: "p" + strconv.Itoa(i)})
	}
	if err := tb.Apply(b); err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply([]Change{{Key: 5, Plan: "one-more"}}); err == nil {
		t.Fatal("a plan name past MaxPlans was numbered")
	}
	if p, _ := tb.Plan(5); p != "p4" {
		t.Fatalf("a refused batch changed client 5 to %q", p)
	}
}

// TestResolve: the client's values, whole and in path order, find its
// plan; a value holding what would be a separator finds nothing of
// another's.
func TestResolve(t *testing.T) {
	f, err := config.ParseRules("r.yaml", []byte(`domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1}
        plans: {table: customers, limits: {pro: 100, ent: 1000}}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	r := rs.Rules()[0]
	tb := New()
	if err := tb.Apply([]Change{
		{Key: tb.Key([]string{"a", "bob"}), Plan: "pro"},
		{Key: tb.Key([]string{"a", "eve"}), Plan: "gold"}, // a plan the rule does not name
	}); err != nil {
		t.Fatal(err)
	}
	var ts Tables
	es := func(tenant, user string) []config.Entry {
		return []config.Entry{{Key: "tenant", Value: tenant}, {Key: "user", Value: user}}
	}
	if got := ts.Resolve(r, es("a", "bob")); got != r {
		t.Fatal("a table not set changed the rule")
	}
	ts.Set("api", "customers", tb)
	cases := []struct {
		tenant, user string
		limit        int64
	}{
		{"a", "bob", 100},
		{"b", "bob", 1},  // another tenant's bob
		{"a/bob", "", 1}, // separators in values
		{"", "a/bob", 1},
		{"a", "eve", 1},   // a plan this rule does not name: the rule's own limit
		{"a", "carol", 1}, // no plan
	}
	for _, c := range cases {
		if got := ts.Resolve(r, es(c.tenant, c.user)); got.Limit != c.limit || got.ID != r.ID {
			t.Errorf("%q/%q: limit %d id %q, want %d %q", c.tenant, c.user, got.Limit, got.ID, c.limit, r.ID)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ts.Resolve(r, es("a", "bob")) }); n != 0 {
		t.Fatalf("Resolve allocates %v times", n)
	}
	ts.Set("api", "customers", nil)
	if got := ts.Resolve(r, es("a", "bob")); got != r {
		t.Fatal("a removed table still resolves")
	}
}

// BenchmarkLoad10M loads ten million clients and reports the bytes a
// client takes (the places, and the heap the collector sees) and a
// lookup's cost.
func BenchmarkLoad10M(b *testing.B) {
	const n = 10_000_000
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		tb := New()
		batch := make([]Change, 0, 100_000)
		plans := []string{"free", "pro", "ent"}
		for i := 0; i < n; i++ {
			batch = append(batch, Change{Key: tb.Key([]string{"client-" + strconv.Itoa(i)}), Plan: plans[i%3]})
			if len(batch) == cap(batch) {
				if err := tb.Apply(batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		tb.Publish()
		batch = nil
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(tb.Bytes())/n, "place-B/client")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/client")
		k := tb.Key([]string{"client-4242"})
		runtime.KeepAlive(tb)
		if p, _ := tb.Plan(k); p != plans[4242%3] {
			b.Fatalf("client 4242 has %q", p)
		}
	}
}

// BenchmarkResolve is what a plans rule adds to a decision: hashing the
// client's value and finding its plan.
func BenchmarkResolve(b *testing.B) {
	for _, n := range []int{1000, 1_000_000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			f, _ := config.ParseRules("r.yaml", []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    plans: {table: t, limits: {pro: 100}}\n"))
			rs, err := config.Compile([]*config.File{f})
			if err != nil {
				b.Fatal(err)
			}
			r := rs.Rules()[0]
			tb := New()
			var batch []Change
			for i := 0; i < n; i++ {
				batch = append(batch, Change{Key: tb.Key([]string{"client-" + strconv.Itoa(i)}), Plan: "pro"})
			}
			_ = tb.Apply(batch)
			var ts Tables
			ts.Set("api", "t", tb)
			es := make([][]config.Entry, 1024)
			for i := range es {
				es[i] = []config.Entry{{Key: "k", Value: "client-" + strconv.Itoa(i*(n/1024+1)%n)}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if ts.Resolve(r, es[i&1023]).Limit != 100 {
					b.Fatal("no plan")
				}
			}
		})
	}
}
