package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/aggregator"
	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/analytics"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
	"github.com/velvetrope/velvetrope/sink"
)

// kindRules are one rule of each kind the analytics tell apart, each of a
// few hits a day (a run refills nothing): a hard limit with Envoy's
// semantics and one with an algorithm, a deferring rule, a shadow rule, a
// soft throttle, an elastic throttle and its pool (room for one
// borrowing), `mode: local` and `mode: sync`.
const kindRules = `domain: kinds
pools:
  - name: spare
    rate_limit: {unit: day, requests_per_unit: 1}
descriptors:
  - key: envoy
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: hard
    algorithm: fixed_window
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: later
    algorithm: token_bucket
    on_exceed: defer
    defer: {target: "http://127.0.0.1:9"}
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: shadow
    algorithm: sliding_window
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: soft
    algorithm: fixed_window
    throttle: {type: soft, overage_percent: 50}
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: elastic
    algorithm: fixed_window
    throttle: {type: elastic, pool: spare, max_multiplier: 3}
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: local
    algorithm: sliding_log
    mode: local
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: sync
    algorithm: gcra
    mode: sync
    rate_limit: {unit: day, requests_per_unit: 2}
`

// kindCalls is how often each kind's key is asked: past every limit.
const kindCalls = 6

// kindKeys are the rules' keys, each asked for one value.
var kindKeys = []string{"envoy", "hard", "later", "shadow", "soft", "elastic", "local", "sync"}

// kindPlan is what each rule must answer to kindCalls one-hit requests:
// the test fails if the run did not reach a kind's every count.
var kindPlan = map[string]sink.KeyUsage{
	"envoy":   {Allowed: 3, Denied: 3},
	"hard":    {Allowed: 3, Denied: 3},
	"later":   {Allowed: 3, Deferred: 3},
	"shadow":  {Allowed: 2, ShadowDenied: 4},
	"soft":    {Allowed: 3, OverSoft: 1, Denied: 3},
	"elastic": {Allowed: 2, Elastic: 1, Denied: 4}, // its own hit, one borrowed; then the pool has no room
	"local":   {Allowed: 2, Denied: 4},
	"sync":    {Allowed: 2, Denied: 4},
}

// driveKinds asks every kind's key kindCalls times through c and returns
// how each was answered, as analytics must count it.
func driveKinds(t *testing.T, c *checker.Checker) map[string]sink.KeyUsage {
	t.Helper()
	out := map[string]sink.KeyUsage{}
	var d ratelimit.Decision
	for range kindCalls {
		for _, k := range kindKeys {
			q := &ratelimit.Request{Domain: "kinds", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: k, Value: "v"}}}}}
			if err := c.Check(context.Background(), q, &d); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			u, st := out[k], d.Statuses[0]
			switch {
			case st.Shadowed:
				u.ShadowDenied++
			case d.Code == ratelimit.OK:
				u.Allowed++
				if st.OverSoft {
					u.OverSoft++
				}
				if st.Elastic {
					u.Elastic++
				}
			case d.Code == ratelimit.Deferred:
				u.Deferred++
			default:
				u.Denied++
			}
			out[k] = u
		}
	}
	for _, k := range kindKeys {
		if out[k] != kindPlan[k] {
			t.Fatalf("%s was answered %+v; the test plans %+v", k, out[k], kindPlan[k])
		}
	}
	return out
}

// wantKinds is what the analytics API must answer for the answers got:
// every count of every row, the pool apart.
type wantKinds struct {
	rules []sink.RuleUsage
	keys  []sink.KeyUsage
	usage map[string]sink.MinuteUsage // per key, summed over minutes
	total sink.MinuteUsage            // the timeline, summed
	pools []sink.PoolUsage
}

func expectKinds(t *testing.T, rs *config.RuleSet, got map[string]sink.KeyUsage) wantKinds {
	t.Helper()
	dom, _ := rs.Lookup("kinds")
	w := wantKinds{usage: map[string]sink.MinuteUsage{}}
	for _, k := range kindKeys {
		r := dom.Match([]config.Entry{{Key: k, Value: "v"}})
		u := got[k]
		u.Domain, u.Rule, u.Descriptor = "kinds", r.ID, k+"=v"
		w.rules = append(w.rules, sink.RuleUsage{Domain: "kinds", Rule: r.ID, Allowed: u.Allowed, Denied: u.Denied,
			Deferred: u.Deferred, ShadowDenied: u.ShadowDenied, OverSoft: u.OverSoft, Elastic: u.Elastic,
			DenyRate: sink.DenyRate(u.Allowed, u.Denied, u.Deferred, u.ShadowDenied)})
		if u.Denied+u.Deferred > 0 {
			w.keys = append(w.keys, u)
		}
		// every call of one hit; a refusal's hits are denied_cost (a
		// shadow rule's too under Envoy's semantics only: none here)
		m := sink.MinuteUsage{Allowed: u.Allowed, Denied: u.Denied, Deferred: u.Deferred, ShadowDenied: u.ShadowDenied,
			OverSoft: u.OverSoft, Elastic: u.Elastic, AllowedCost: u.Allowed, DeniedCost: u.Denied}
		w.usage[u.Descriptor] = m
		w.total = addMinutes(w.total, m)
	}
	slices.SortFunc(w.rules, func(a, b sink.RuleUsage) int { return cmp.Compare(a.Rule, b.Rule) })
	slices.SortFunc(w.keys, func(a, b sink.KeyUsage) int {
		return cmp.Or(cmp.Compare(b.Denied+b.Deferred, a.Denied+a.Deferred), cmp.Compare(b.Denied, a.Denied), cmp.Compare(a.Rule, b.Rule))
	})
	pool := rs.Pool("kinds", "spare")
	e := got["elastic"]
	// the pool lent its one hit, and refused every later borrowing: the
	// rule's ceiling (3) was never reached, so each of its refusals was
	// the pool's
	w.pools = []sink.PoolUsage{{Domain: "kinds", Pool: "spare", Rule: pool.ID, Borrowed: e.Elastic, BorrowedHits: e.Elastic,
		Refused: e.Denied}}
	return w
}

func addMinutes(a, b sink.MinuteUsage) sink.MinuteUsage {
	a.Allowed += b.Allowed
	a.Denied += b.Denied
	a.Deferred += b.Deferred
	a.ShadowDenied += b.ShadowDenied
	a.OverSoft += b.OverSoft
	a.Elastic += b.Elastic
	a.AllowedCost += b.AllowedCost
	a.DeniedCost += b.DeniedCost
	return a
}

// apiKinds reads the analytics API over store as a client would and
// returns what is wrong with its answers ("" when nothing).
func apiKinds(t *testing.T, api *httptest.Server, w wantKinds) string {
	t.Helper()
	var wrong []string
	get := func(path string, v url.Values, out any) {
		t.Helper()
		resp, err := http.Get(api.URL + path + "?" + v.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	q := url.Values{"window": {"1h"}, "domain": {"kinds"}}
	var rules httpjson.Rules
	get("/v1/analytics/rules", q, &rules)
	if !slices.Equal(rules.Rules, w.rules) {
		wrong = append(wrong, fmt.Sprintf("rules:\n got %+v\nwant %+v", rules.Rules, w.rules))
	}
	var top httpjson.TopDenied
	get("/v1/analytics/top-denied", url.Values{"window": {"1h"}, "domain": {"kinds"}, "limit": {"100"}}, &top)
	if !slices.Equal(top.Keys, w.keys) {
		wrong = append(wrong, fmt.Sprintf("top-denied:\n got %+v\nwant %+v", top.Keys, w.keys))
	}
	for desc, want := range w.usage {
		var u httpjson.Usage
		get("/v1/analytics/usage", url.Values{"window": {"1h"}, "domain": {"kinds"}, "key": {desc}}, &u)
		var sum sink.MinuteUsage
		for _, m := range u.Minutes {
			sum = addMinutes(sum, m)
		}
		if sum != want {
			wrong = append(wrong, fmt.Sprintf("usage of %s: got %+v, want %+v", desc, sum, want))
		}
	}
	var tl httpjson.Timeline
	get("/v1/analytics/timeline", q, &tl)
	var total sink.MinuteUsage
	for _, m := range tl.Minutes {
		total = addMinutes(total, sink.MinuteUsage{Allowed: m.Allowed, Denied: m.Denied, Deferred: m.Deferred, ShadowDenied: m.ShadowDenied,
			OverSoft: m.OverSoft, Elastic: m.Elastic, AllowedCost: m.AllowedCost, DeniedCost: m.DeniedCost})
	}
	if total != w.total {
		wrong = append(wrong, fmt.Sprintf("timeline (the pool is no request): got %+v, want %+v", total, w.total))
	}
	var pools httpjson.Pools
	get("/v1/analytics/pools", q, &pools)
	if !slices.Equal(pools.Pools, w.pools) {
		wrong = append(wrong, fmt.Sprintf("pools:\n got %+v\nwant %+v", pools.Pools, w.pools))
	}
	return strings.Join(wrong, "\n")
}

// checkKinds waits until the analytics API answers every count of every
// row as the checker answered them.
func checkKinds(t *testing.T, store sink.Analytics, w wantKinds, flush func(), within time.Duration) {
	t.Helper()
	mux := http.NewServeMux()
	analytics.New(store, "", nil).Register(mux)
	api := httptest.NewServer(mux)
	defer api.Close()
	for deadline := time.Now().Add(within); ; {
		flush()
		wrong := apiKinds(t, api, w)
		if wrong == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the analytics API did not answer the decisions within %v:\n%s", within, wrong)
		}
		time.Sleep(200 * time.Millisecond) // waiting for the pipeline's goroutines
	}
}

func kindRuleSet(t *testing.T) *config.RuleSet {
	t.Helper()
	f, err := config.ParseRules("kinds.yaml", []byte(kindRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestEveryKindOfDecisionReachesClickHouse (issue 20): one rule of each
// kind — hard limits allowing and denying, on_exceed: defer, shadow_mode,
// a soft throttle, an elastic throttle with its pool, mode: local, mode:
// sync — decided by a checker, carried by Kafka to the aggregator, written
// to the real ClickHouse: the analytics API answers every count of every
// row as the callers were answered (allowed, denied, deferred,
// shadow-denied, over-soft, elastic), in top-denied, usage, rules and the
// timeline, and the pool's borrowings under pools only. The shadow rule's
// refusals used to be denials, `mode: local` used to be missing, the
// pool was listed among the keys, and over-soft and elastic admissions
// were not counted.
func TestEveryKindOfDecisionReachesClickHouse(t *testing.T) {
	broker, raddr, chaddr := testsvc.Kafka(t), testsvc.Redis(t), testsvc.ClickHouse(t)
	rs := kindRuleSet(t)
	ctx := context.Background()
	ch, err := sink.NewClickHouse(sink.ClickHouseConfig{Addr: chaddr, Database: testsvc.Unique("kinds")})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	w, err := sink.NewWriter(sink.WriterConfig{FlushInterval: time.Hour}, ch)
	if err != nil {
		t.Fatal(err)
	}
	topic, prefix := testsvc.Unique("kinds"), testsvc.Unique("kinds")
	aggClient := redis.NewClient(&redis.Options{Addr: raddr})
	defer aggClient.Close()
	agg, err := aggregator.NewKafka(aggregator.Config{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g"),
		Partitions: 4, Analytics: w}, counters.NewRedis(aggClient, prefix, 0))
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
	c, err := checker.New(checker.Config{InstanceName: "kinds"}, config.NewStore(rs), counters.NewRedis(rc, prefix, 0), prod,
		limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	want := expectKinds(t, rs, driveKinds(t, c))
	checkKinds(t, ch, want, func() {
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}, 60*time.Second)
}

// TestEveryKindOfDecisionReachesTheMemoryStore (issue 20): the same rules
// through dev's wiring — checker → MemBus → embedded aggregator → the
// in-memory analytics store — answer the same counts.
func TestEveryKindOfDecisionReachesTheMemoryStore(t *testing.T) {
	rs := kindRuleSet(t)
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
	c, err := checker.New(checker.Config{InstanceName: "kinds"}, config.NewStore(rs), ms, bus, limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	want := expectKinds(t, rs, driveKinds(t, c))
	checkKinds(t, mem, want, func() {
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}, 10*time.Second)
}
