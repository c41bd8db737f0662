package e2e

import (
	"context"
	"fmt"
	"strings"
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
	"github.com/velvetrope/velvetrope/ratelimit"
	"github.com/velvetrope/velvetrope/sink"
)

// combo is one combination of the rule format's extensions.
type combo struct {
	alg                                     config.Algorithm
	mode, near, throttle, onExceed, failure string
	shards                                  int
	shadow                                  bool
}

func (c combo) String() string {
	alg := string(c.alg)
	if alg == "" {
		alg = "envoy"
	}
	s := alg
	for _, f := range []struct{ name, v string }{{"mode", c.mode}, {"near_limit", c.near}, {"throttle", c.throttle},
		{"on_exceed", c.onExceed}, {"failure", c.failure}} {
		if f.v != "" {
			s += " " + f.name + "=" + f.v
		}
	}
	if c.shards > 0 {
		s += fmt.Sprintf(" shards=%d", c.shards)
	}
	if c.shadow {
		s += " shadow"
	}
	return s
}

// matrixLimit is every matrix rule's limit, per hour: a test run refills
// no bucket by a whole hit.
const matrixLimit = 5

// yaml writes c as a descriptor of key.
func (c combo) yaml(key string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", key, matrixLimit)
	add := func(format string, args ...any) { fmt.Fprintf(&b, "    "+format+"\n", args...) }
	if c.alg != "" {
		add("algorithm: %s", c.alg)
	}
	if c.mode != "" {
		add("mode: %s", c.mode)
	}
	if c.near != "" {
		add("near_limit: %s", c.near)
	}
	switch c.throttle {
	case "hard":
		add("throttle: {type: hard}")
	case "soft":
		add("throttle: {type: soft, overage_percent: 40}")
	case "elastic":
		add("throttle: {type: elastic, pool: p}")
	}
	if c.shards > 0 {
		add("shards: %d", c.shards)
	}
	if c.onExceed != "" {
		add("on_exceed: %s", c.onExceed)
		if c.onExceed == "defer" {
			add(`defer: {target: "http://127.0.0.1:9"}`)
		}
	}
	if c.failure != "" {
		add("failure: %s", c.failure)
	}
	if c.shadow {
		add("shadow_mode: true")
	}
	return b.String()
}

const matrixHead = `domain: mx
pools:
  - name: p
    rate_limit: {unit: hour, requests_per_unit: 1000000}
descriptors:
`

// matrix is every combination of algorithm, mode, near_limit, throttle,
// shards, on_exceed, failure policy and shadow mode that the rule format
// accepts (each tried alone: the parser and compiler decide), as one rule
// file: the rule of combination i has key m<i>. A default is tried
// unwritten only (mode async, near_limit sync, throttle hard, shards 1,
// on_exceed deny, failure open): written out, it compiles to the same rule.
func matrix(t *testing.T) ([]combo, *config.RuleSet) {
	t.Helper()
	var accepted []combo
	var file strings.Builder
	file.WriteString(matrixHead)
	tried := 0
	for _, alg := range config.Algorithms() {
		for _, mode := range []string{"", "sync", "local"} {
			for _, near := range []string{"", "async"} {
				for _, th := range []string{"", "soft", "elastic"} {
					for _, shards := range []int{0, 4} {
						for _, ex := range []string{"", "defer"} {
							for _, fail := range []string{"", "closed", "local_budget"} {
								for _, shadow := range []bool{false, true} {
									c := combo{alg, mode, near, th, ex, fail, shards, shadow}
									tried++
									f, err := config.ParseRules("one.yaml", []byte(matrixHead+c.yaml("k")))
									if err != nil {
										continue
									}
									if _, err := config.Compile([]*config.File{f}); err != nil {
										continue
									}
									file.WriteString(c.yaml(fmt.Sprintf("m%d", len(accepted))))
									accepted = append(accepted, c)
								}
							}
						}
					}
				}
			}
		}
	}
	f, err := config.ParseRules("matrix.yaml", []byte(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rule matrix: %d of %d combinations accepted by the rule format", len(accepted), tried)
	return accepted, rs
}

// outcome tallies one matrix rule's decisions as the checker answered
// them: what analytics and the counters must then show.
type tally struct {
	decisions, allowed, denied, deferred, shadowed, elastic uint64
}

const matrixCalls = 8 // above the limit, and above a soft or elastic ceiling of a 5-hit limit only for hard rules

// drive sends matrixCalls one-hit requests for every matrix rule through
// c and tallies the answers.
func drive(t *testing.T, c *checker.Checker, combos []combo) []tally {
	t.Helper()
	out := make([]tally, len(combos))
	var d ratelimit.Decision
	for round := range matrixCalls {
		for i := range combos {
			q := &ratelimit.Request{Domain: "mx", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: fmt.Sprintf("m%d", i), Value: "v"}}}}}
			if err := c.Check(context.Background(), q, &d); err != nil {
				t.Fatalf("%s, call %d: %v", combos[i], round, err)
			}
			st, tl := d.Statuses[0], &out[i]
			tl.decisions++
			switch {
			case st.Code == ratelimit.OK && st.Shadowed:
				tl.shadowed++
			case st.Code == ratelimit.OK:
				tl.allowed++
				if st.Elastic {
					tl.elastic++
				}
			case st.Code == ratelimit.Deferred:
				tl.deferred++
			default:
				tl.denied++
			}
		}
	}
	return out
}

// stored is what the counter store holds for matrix rule i over the
// windows the run touched: the consumption of its shared counter (every
// shard of a hot key, and its shared near-band counter), or for `mode:
// sync` the consumption the exact engine's counter reports (a probe).
// ok is false for `mode: local`: its counters live in the checker alone.
func stored(t *testing.T, cs counters.Store, rs *config.RuleSet, i int, windows []int64) (int64, bool) {
	t.Helper()
	ctx := context.Background()
	dom, _ := rs.Lookup("mx")
	es := []config.Entry{{Key: fmt.Sprintf("m%d", i), Value: "v"}}
	r := dom.Match(es)
	if r == nil {
		t.Fatalf("m%d matches no rule", i)
	}
	key := string(config.AppendCounterKey(nil, r, es))
	switch r.Mode {
	case config.ModeLocal:
		return 0, false
	case config.ModeSync:
		q := counters.SyncRequestFor(r, key, 0)
		q.Now = time.Now().UnixNano()
		res, err := cs.ChargeSync(ctx, &q)
		if err != nil {
			t.Fatal(err)
		}
		return q.Limit - res.Remaining, true
	}
	if r.Algorithm.Bucket() {
		items := []counters.ReadItem{{Key: key, Kind: counters.KindTAT}}
		if err := cs.Read(ctx, "matrix/0", items); err != nil {
			t.Fatal(err)
		}
		return items[0].Cum, true
	}
	return windowTotal(t, cs, r, key, windows), true
}

// windowTotal sums a window counter over windows, every shard of a hot
// key included.
func windowTotal(t *testing.T, cs counters.Store, r *config.Rule, key string, windows []int64) int64 {
	t.Helper()
	keys := []string{key}
	for j := range r.Shards {
		if r.Shards > 1 {
			keys = append(keys, counters.ShardKey(key, j))
		}
	}
	var items []counters.ReadItem
	for _, w := range windows {
		for _, k := range keys {
			items = append(items, counters.ReadItem{Key: k, Kind: counters.KindWindow, Window: w})
		}
	}
	if err := cs.Read(context.Background(), "matrix/0", items); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, it := range items {
		sum += it.Total
	}
	return sum
}

// hourWindows are the hour windows between from and now.
func hourWindows(from time.Time) []int64 {
	h := int64(time.Hour)
	first, last := from.UnixNano()/h*h, time.Now().UnixNano()/h*h
	if first == last {
		return []int64{first}
	}
	return []int64{first, last}
}

// checkMatrix waits until the counters and the analytics hold every
// matrix rule's decisions, and fails naming each combination that does
// not: analytics counts each decision as answered (allowed, denied,
// deferred, shadow-denied); an async counter holds the admitted hits
// (every call under Envoy's semantics), a sync counter what its exact
// engine admitted, the pool what the elastic rules borrowed.
func checkMatrix(t *testing.T, combos []combo, got []tally, rs *config.RuleSet, cs counters.Store,
	an sink.Analytics, flush func(), from time.Time, within time.Duration) {
	t.Helper()
	windows := hourWindows(from)
	var wrong []string
	for deadline := time.Now().Add(within); ; {
		flush()
		wrong = wrong[:0]
		usage, err := an.Rules(context.Background(), sink.RulesQuery{Domain: "mx", Since: from.Add(-time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		byRule := map[string]sink.RuleUsage{}
		for _, u := range usage {
			byRule[u.Rule] = u
		}
		dom, _ := rs.Lookup("mx")
		var borrowed uint64
		for i, c := range combos {
			want := got[i]
			borrowed += want.elastic
			r := dom.Match([]config.Entry{{Key: fmt.Sprintf("m%d", i), Value: "v"}})
			u := byRule[r.ID]
			if u.Allowed != want.allowed || u.Denied != want.denied || u.Deferred != want.deferred || u.ShadowDenied != want.shadowed {
				wrong = append(wrong, fmt.Sprintf("%s: analytics allowed/denied/deferred/shadow %d/%d/%d/%d, answered %d/%d/%d/%d",
					c, u.Allowed, u.Denied, u.Deferred, u.ShadowDenied, want.allowed, want.denied, want.deferred, want.shadowed))
			}
			total, shared := stored(t, cs, rs, i, windows)
			if !shared {
				continue
			}
			wantTotal := int64(want.allowed)
			switch {
			case r.Algorithm == config.AlgEnvoy && r.Mode == config.ModeSync:
				wantTotal = min(int64(want.decisions), r.Capacity()) // every call counts; a sync window reports up to its ceiling
			case r.Algorithm == config.AlgEnvoy:
				wantTotal = int64(want.decisions) // every call counts
			}
			if total != wantTotal {
				wrong = append(wrong, fmt.Sprintf("%s: counter %d, want %d (answered %+v)", c, total, wantTotal, want))
			}
		}
		if pool := poolRule(t, rs); pool != nil {
			key := string(config.AppendCounterKey(nil, pool, pool.Path))
			if total := windowTotal(t, cs, pool, key, windows); total != int64(borrowed) {
				wrong = append(wrong, fmt.Sprintf("pool p: counter %d, want the %d hits elastic rules borrowed", total, borrowed))
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d combinations did not reach the counters and analytics within %v:\n%s",
				len(wrong), len(combos), within, strings.Join(wrong, "\n"))
		}
		time.Sleep(100 * time.Millisecond) // waiting for the pipeline's goroutines
	}
}

func poolRule(t *testing.T, rs *config.RuleSet) *config.Rule {
	t.Helper()
	for _, r := range rs.Rules() {
		if r.Pool != nil {
			return r.Pool
		}
	}
	return nil
}

// TestEveryCombinationReachesCountersAndAnalyticsInMemory (issue 19, item
// 3): dev's wiring — checker → MemBus → embedded aggregator → MemStore,
// and the usage writer into the in-memory analytics — carries the deltas
// of every combination the rule format accepts. A `sliding_log` rule with
// `mode: sync` made deltas the bus refused, which stopped all counting
// behind them.
func TestEveryCombinationReachesCountersAndAnalyticsInMemory(t *testing.T) {
	combos, rs := matrix(t)
	ctx := context.Background()
	ms := counters.NewMemStore()
	bus, err := events.NewMemBus(16, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	mem := sink.NewMemory(time.Hour)
	w, err := sink.NewWriter(sink.WriterConfig{FlushInterval: time.Hour}, mem)
	if err != nil {
		t.Fatal(err)
	}
	agg := aggregator.NewEmbedded(bus, ms, nil).WithAnalytics(w)
	if err := agg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer agg.Stop(ctx)
	c, err := checker.New(checker.Config{InstanceName: "mx"}, config.NewStore(rs), ms, bus, limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	from := time.Now()
	got := drive(t, c, combos)
	checkMatrix(t, combos, got, rs, ms, mem, func() {
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}, from, 10*time.Second)
	if n := bus.DroppedDeltas(); n != 0 {
		t.Fatalf("the bus set aside %d deltas: a rule the format accepts made invalid ones", n)
	}
	if s := c.Snapshot(); s.EmitErrors != 0 || s.DeltasEmitted == 0 {
		t.Fatalf("emit errors %d, deltas emitted %d", s.EmitErrors, s.DeltasEmitted)
	}
}

// TestEveryCombinationReachesCountersAndAnalyticsOnKafka (issue 19, item
// 3): the same matrix through the production pipeline — checker → Kafka →
// aggregator → Redis, and the aggregator's analytics writer. The Kafka
// producer used to drop the deltas of `sliding_log` rules as invalid, so
// they never reached the analytics.
func TestEveryCombinationReachesCountersAndAnalyticsOnKafka(t *testing.T) {
	broker, raddr := testsvc.Kafka(t), testsvc.Redis(t)
	// the rules count per hour on the real clock: a run that crosses the
	// hour reads the next hour's counters (make test once met 11:00 here)
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 2*time.Minute {
		t.Logf("waiting %v for the hour to turn: the run would cross it", left.Round(time.Second))
		time.Sleep(left + time.Second)
	}
	combos, rs := matrix(t)
	ctx := context.Background()
	topic, prefix := testsvc.Unique("mx"), testsvc.Unique("mx")
	mem := sink.NewMemory(time.Hour)
	w, err := sink.NewWriter(sink.WriterConfig{FlushInterval: time.Hour}, mem)
	if err != nil {
		t.Fatal(err)
	}
	aggClient := redis.NewClient(&redis.Options{Addr: raddr})
	defer aggClient.Close()
	aggStore := counters.NewRedis(aggClient, prefix, 0)
	agg, err := aggregator.NewKafka(aggregator.Config{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g"),
		Partitions: 4, Analytics: w}, aggStore)
	if err != nil {
		t.Fatal(err)
	}
	if err := agg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer agg.Stop(ctx)
	prod, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := prod.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer prod.Close(ctx)
	rc := redis.NewClient(&redis.Options{Addr: raddr})
	defer rc.Close()
	c, err := checker.New(checker.Config{InstanceName: "mx"}, config.NewStore(rs), counters.NewRedis(rc, prefix, 0), prod,
		limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	from := time.Now()
	got := drive(t, c, combos)
	checkMatrix(t, combos, got, rs, aggStore, mem, func() {
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}, from, 60*time.Second)
	if n := prod.DroppedDeltas(); n != 0 {
		t.Fatalf("the producer set aside %d deltas: a rule the format accepts made invalid ones", n)
	}
	if s := c.Snapshot(); s.EmitErrors != 0 || s.DeltasEmitted == 0 {
		t.Fatalf("emit errors %d, deltas emitted %d", s.EmitErrors, s.DeltasEmitted)
	}
}
