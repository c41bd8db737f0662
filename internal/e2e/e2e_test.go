package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/aggregator"
	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/operate"
	"github.com/velvetrope/velvetrope/ratelimit"
)

type fleet struct {
	checkers []*checker.Checker
	ops      []*operate.Operator // of checkers, in order
	agg      *aggregator.Kafka
	store    *counters.Redis
	stop     func()
}

// startFleet starts n checkers and one aggregator on a fresh topic and
// key prefix.
func startFleet(t *testing.T, rules string, n int) *fleet {
	t.Helper()
	broker, raddr := testsvc.Kafka(t), testsvc.Redis(t)
	topic, prefix := testsvc.Unique("e2e"), testsvc.Unique("e")
	f, err := config.ParseRules("e2e.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var closers []func()
	aggClient := redis.NewClient(&redis.Options{Addr: raddr})
	aggStore := counters.NewRedis(aggClient, prefix, 0)
	agg, err := aggregator.NewKafka(aggregator.Config{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g"),
		Partitions: 4}, aggStore)
	if err != nil {
		t.Fatal(err)
	}
	if err := agg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fl := &fleet{agg: agg, store: aggStore}
	for i := range n {
		rc := redis.NewClient(&redis.Options{Addr: raddr})
		prod, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 4,
			SpillPath: t.TempDir() + "/spill"})
		if err != nil {
			t.Fatal(err)
		}
		prod.Start(ctx)
		cs := counters.NewRedis(rc, prefix, 0)
		c, err := checker.New(checker.Config{InstanceName: fmt.Sprintf("c%d", i)}, config.NewStore(rs), cs, prod, limiter.SystemClock{})
		if err != nil {
			t.Fatal(err)
		}
		c.Start(ctx)
		fl.checkers = append(fl.checkers, c)
		fl.ops = append(fl.ops, operate.New(c, cs))
		closers = append(closers, func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			c.Stop(sctx)
			prod.Close(sctx)
			rc.Close()
		})
	}
	// every checker knows the others from the store's registry (a
	// heartbeat a second) before the load starts, as a fleet running for
	// a while does
	for deadline := time.Now().Add(10 * time.Second); ; {
		ready := true
		for _, c := range fl.checkers {
			if live, _, _ := c.Fleet(); live != n {
				ready = false
			}
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkers did not all see %d live instances within 10 s", n)
		}
		time.Sleep(50 * time.Millisecond) // integration test: waiting for real heartbeats
	}
	fl.stop = func() {
		for _, c := range closers {
			c()
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		agg.Stop(sctx)
		aggClient.Close()
	}
	return fl
}

// load sends requests for key from workers goroutines per checker until
// total requests were sent, and returns the hits admitted.
func (fl *fleet) load(t *testing.T, key string, total, workers int, pace time.Duration) int64 {
	t.Helper()
	return fl.loadValue(t, key, "shared", total, workers, pace)
}

// loadValue is load at the key's value v.
func (fl *fleet) loadValue(t *testing.T, key, v string, total, workers int, pace time.Duration) int64 {
	t.Helper()
	var sent, admitted atomic.Int64
	var wg sync.WaitGroup
	for _, c := range fl.checkers {
		for range workers {
			wg.Go(func() {
				var d ratelimit.Decision
				q := &ratelimit.Request{Domain: "api", Hits: 1,
					Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: key, Value: v}}}}}
				for sent.Add(1) <= int64(total) {
					if err := c.Check(context.Background(), q, &d); err != nil {
						t.Error(err)
						return
					}
					if d.Allowed() {
						admitted.Add(1)
					}
					if pace > 0 {
						time.Sleep(pace) // paces a load generator, not a clock
					}
				}
			})
		}
	}
	wg.Wait()
	return admitted.Load()
}

func (fl *fleet) redisTotal(t *testing.T, counter string, window int64) int64 {
	t.Helper()
	items := []counters.ReadItem{{Key: counter, Kind: counters.KindWindow, Window: window}}
	if err := fl.store.Read(context.Background(), "nobody/0", items); err != nil {
		t.Fatal(err)
	}
	return items[0].Total
}

const dayRules = `domain: api
descriptors:
  - key: exact
    algorithm: fixed_window
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: loose
    algorithm: fixed_window
    near_limit: async
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: envoy
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: bucket
    algorithm: token_bucket
    burst: 50
    rate_limit: {unit: second, requests_per_unit: 200}
  - key: hot
    algorithm: fixed_window
    shards: 4
    rate_limit: {unit: day, requests_per_unit: 1000}
`

func dayStart() int64 {
	now := time.Now().UnixNano()
	return now - now%int64(24*time.Hour)
}

// TestTwoCheckersShareOneBudget: load split over two checkers, well above
// the limit; near_limit sync admits exactly the limit and Redis ends with
// exactly what was admitted.
func TestTwoCheckersShareOneBudget(t *testing.T) {
	fl := startFleet(t, dayRules, 2)
	defer fl.stop()
	window := dayStart()
	start := time.Now()
	admitted := fl.load(t, "exact", 3000, 4, 0)
	elapsed := time.Since(start)
	if window != dayStart() {
		t.Fatal("the test straddled midnight UTC; run it again")
	}
	if admitted != 1000 {
		t.Fatalf("two checkers admitted %d, limit 1000", admitted)
	}
	counter := "api:exact|exact=shared"
	waitTotal(t, fl, counter, window, admitted)
	st := [2]checker.Snapshot{fl.checkers[0].Snapshot(), fl.checkers[1].Snapshot()}
	t.Logf("near_limit sync: 3000 requests from 8 goroutines on 2 checkers in %v: admitted %d of limit 1000; store charges %d+%d, far-band decisions %d+%d",
		elapsed.Round(time.Millisecond), admitted, st[0].SyncCharges, st[1].SyncCharges, st[0].FarBand, st[1].FarBand)
}

// TestEnvoyRulesChargeDeniedHitsToo: Envoy semantics through the pipeline:
// the Redis total counts every call.
func TestEnvoyRulesChargeDeniedHitsToo(t *testing.T) {
	fl := startFleet(t, dayRules, 2)
	defer fl.stop()
	window := dayStart()
	admitted := fl.load(t, "envoy", 1500, 2, 0)
	if admitted != 1000 {
		t.Fatalf("admitted %d, limit 1000 (checkers: %+v / %+v)", admitted, fl.checkers[0].Snapshot(), fl.checkers[1].Snapshot())
	}
	waitTotal(t, fl, "api:envoy|envoy=shared", window, 1500)
}

// TestNearLimitAsyncOvershootMeasured: with near_limit async nobody calls
// the store; the overshoot is measured and reported, not asserted.
func TestNearLimitAsyncOvershootMeasured(t *testing.T) {
	fl := startFleet(t, dayRules, 2)
	defer fl.stop()
	window := dayStart()
	start := time.Now()
	admitted := fl.load(t, "loose", 3000, 4, 200*time.Microsecond)
	elapsed := time.Since(start)
	inBurst := admitted
	// Budget refused during the burst must not be lost: the slices are
	// re-cut and the rest is admitted after it. (How much a burst gets
	// on its own is issue 24's measure; on a loaded machine — make test,
	// every package at once — one burst admitted 899.)
	for deadline := time.Now().Add(5 * time.Second); admitted < 900 && time.Now().Before(deadline); {
		admitted += fl.load(t, "loose", 10, 1, 5*time.Millisecond)
	}
	if admitted < 900 {
		t.Fatalf("admitted %d (%d in the burst): under-admission below 90 %% of the limit 1000 even after it", admitted, inBurst)
	}
	waitTotal(t, fl, "api:loose|loose=shared", window, admitted)
	t.Logf("near_limit async: 3000 requests (8 goroutines, 200µs pause each) on 2 checkers in %v: admitted %d of limit 1000 (%d in the burst), overshoot %.1f%%, store charges %d",
		elapsed.Round(time.Millisecond), admitted, inBurst, float64(admitted-1000)/10, fl.checkers[0].Snapshot().SyncCharges+fl.checkers[1].Snapshot().SyncCharges)
}

// TestTokenBucketNeverAboveRate: admitted <= burst + rate × elapsed (+ the
// hits of one refresh interval).
func TestTokenBucketNeverAboveRate(t *testing.T) {
	fl := startFleet(t, dayRules, 2)
	defer fl.stop()
	start := time.Now()
	admitted := fl.load(t, "bucket", 4000, 4, 500*time.Microsecond)
	elapsed := time.Since(start)
	bound := 50 + int64(200*elapsed.Seconds()) + 200*50/1000
	if admitted > bound {
		t.Fatalf("admitted %d in %v, bound %d", admitted, elapsed, bound)
	}
	t.Logf("token bucket 200/s burst 50: admitted %d in %v (bound %d)", admitted, elapsed.Round(time.Millisecond), bound)
}

func waitTotal(t *testing.T, fl *fleet, counter string, window, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := fl.redisTotal(t, counter, window)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Redis total %d, want %d", counter, got, want)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the real pipeline to drain
	}
}

// TestHotKeyShardsExact: a hot key spread over 4 shards, under the
// default near_limit: sync: far from the limit each checker counts in its
// own shard; near it every checker charges the one shared counter, which
// sees all the others' near-band charges. Two checkers admit exactly the
// limit, and the shards plus the shared counter add up to it.
func TestHotKeyShardsExact(t *testing.T) {
	fl := startFleet(t, dayRules, 2)
	defer fl.stop()
	window := dayStart()
	start := time.Now()
	admitted := fl.load(t, "hot", 3000, 4, 200*time.Microsecond)
	elapsed := time.Since(start)
	if window != dayStart() {
		t.Fatal("the test straddled midnight UTC; run it again")
	}
	t.Logf("hot key, 4 shards: 3000 requests (8 goroutines, 200µs pauses) on 2 checkers in %v: admitted %d of limit 1000",
		elapsed.Round(time.Millisecond), admitted)
	if admitted != 1000 {
		t.Fatalf("admitted %d, want exactly the limit 1000", admitted)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		sum := fl.redisTotal(t, "api:hot|hot=shared", window) // the shared counter of near-band charges
		for i := range int64(4) {
			sum += fl.redisTotal(t, counters.ShardKey("api:hot|hot=shared", i), window)
		}
		if sum == admitted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shards and shared counter add up to %d, admitted %d", sum, admitted)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the real pipeline to drain
	}
}

// TestColdStartShareAcrossThreeCheckers: three checkers that know each
// other from the registry and have never read a near_limit async key
// admit at most a third of its limit each before their first store
// answer, and no store call at all: a burst at a new key gets at most the
// limit in all.
func TestColdStartShareAcrossThreeCheckers(t *testing.T) {
	// The claim is about the cold start: a slice is re-cut at a store
	// answer one pipeline lag after it was cut, and then the bound is the
	// slices' (docs/design.md). A burst slower than that (a loaded machine
	// under -race) tests the re-cut, not the cold start: it runs again on
	// a new fleet and key, at most three times.
	lag := config.DefaultChecker().PipelineLag
	for attempt := range 3 {
		if coldStartBurst(t, fmt.Sprintf("shared%d", attempt)) < lag {
			return
		}
	}
	t.Logf("three bursts each outlasted one pipeline lag (%v): only the slices' bound was checked", lag)
}

// coldStartBurst runs the cold-start burst at key value v on a new fleet,
// checks it if it ended within one pipeline lag, and returns how long it took.
func coldStartBurst(t *testing.T, v string) time.Duration {
	fl := startFleet(t, dayRules, 3)
	defer fl.stop()
	window := dayStart()
	var before [3]checker.Snapshot
	for i, c := range fl.checkers {
		before[i] = c.Snapshot()
	}
	start := time.Now()
	admitted := fl.loadValue(t, "loose", v, 3000, 4, 100*time.Microsecond) // paced: every checker takes part
	elapsed := time.Since(start)
	if window != dayStart() {
		t.Fatal("the test straddled midnight UTC; run it again")
	}
	var charges uint64
	for i, c := range fl.checkers {
		sn := c.Snapshot()
		charges += sn.SyncCharges - before[i].SyncCharges
		live, _, _ := c.Fleet()
		t.Logf("checker %d: %d decisions, %d denied, near %d far %d over %d, %d live", i, sn.Decisions-before[i].Decisions,
			sn.Denied-before[i].Denied, sn.NearBand-before[i].NearBand, sn.FarBand-before[i].FarBand, sn.OverBand-before[i].OverBand, live)
	}
	t.Logf("cold start: 3000 requests from 12 goroutines (100µs pauses) on 3 checkers in %v: admitted %d of limit 1000, store charges %d",
		elapsed.Round(time.Millisecond), admitted, charges)
	if elapsed >= config.DefaultChecker().PipelineLag {
		// re-cut slices: at most the limit plus one slice of each other checker's first round
		if admitted > 1000+2*334 || charges != 0 {
			t.Fatalf("admitted %d (want at most 1,668: the limit and two first-round slices), %d store charges", admitted, charges)
		}
		t.Logf("the burst outlasted one pipeline lag: slices were re-cut; not a cold start")
		return elapsed
	}
	if admitted > 1000 || admitted < 900 || charges != 0 {
		t.Fatalf("admitted %d (want 900 to 1000: a third of the limit each before any answer), %d store charges", admitted, charges)
	}
	waitTotal(t, fl, "api:loose|loose="+v, window, admitted)
	return elapsed
}

const elasticRules = `domain: api
pools:
  - name: shared
    rate_limit: {unit: day, requests_per_unit: 10}
descriptors:
  - key: tenant
    algorithm: fixed_window
    rate_limit: {unit: day, requests_per_unit: 5}
    throttle: {type: elastic, pool: shared, max_multiplier: 3}
`

// TestElasticPoolAcrossTwoCheckers: on two checkers sharing Redis and
// Kafka, a tenant with limit 5, a pool of 10 and max_multiplier 3 admits
// 15 (its own 5 and the whole pool); another tenant then admits only its
// own 5; raising the pool to 20 on one checker lets the other borrow again
// within one control poll. The pool's use in the store never passes its
// capacity (near the limit both are exact by default).
func TestElasticPoolAcrossTwoCheckers(t *testing.T) {
	fl := startFleet(t, elasticRules, 2)
	defer fl.stop()
	window := dayStart()
	loadOn := func(cs []*checker.Checker, tenant string, n int) int {
		admitted := 0
		for i := range n {
			var d ratelimit.Decision
			q := &ratelimit.Request{Domain: "api", Hits: 1,
				Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "tenant", Value: tenant}}}}}
			if err := cs[i%len(cs)].Check(context.Background(), q, &d); err != nil {
				t.Fatal(err)
			}
			if d.Allowed() {
				admitted++
			}
		}
		return admitted
	}
	if n := loadOn(fl.checkers, "acme", 40); n != 15 {
		t.Fatalf("acme on two checkers: admitted %d, want 15 (5 + the pool's 10)", n)
	}
	if n := loadOn(fl.checkers, "globex", 40); n != 5 {
		t.Fatalf("globex with the pool used up: admitted %d, want its own 5", n)
	}
	if err := fl.ops[0].SetPool(context.Background(), "api", "shared", 20); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // integration test: one control poll (1 s) of the other checker
	if n := loadOn(fl.checkers[1:], "globex", 40); n != 10 {
		t.Fatalf("globex after the pool grew to 20, on the other checker: admitted %d more, want 10", n)
	}
	if window != dayStart() {
		t.Fatal("the test straddled midnight UTC; run it again")
	}
	waitTotal(t, fl, "api:#pool:shared|#pool=shared", window, 20)
	ps := fl.ops[1].Pools(context.Background())
	if len(ps) != 1 || ps[0].Capacity != 20 || !ps[0].Override || ps[0].Used != 20 {
		t.Fatalf("pools: %+v", ps)
	}
}
