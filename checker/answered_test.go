package checker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// answers is a rule's decisions by how its caller was answered: what its
// analytics rows must sum to.
type answers struct {
	allowed, denied, deferred, shadow, overSoft, elastic uint64
}

func (a answers) String() string {
	return fmt.Sprintf("allowed %d denied %d deferred %d shadow %d over_soft %d elastic %d",
		a.allowed, a.denied, a.deferred, a.shadow, a.overSoft, a.elastic)
}

// answeredAs tallies status i of decision d as analytics count it: a
// shadow rule's would-be refusal as shadow-denied; a rule with Envoy's
// semantics as it decided itself (the call is charged to it whatever
// the answer); any other rule as the request was answered — admitted
// (over its soft limit, or borrowing), deferred or denied.
func answeredAs(n *answers, d *ratelimit.Decision, i int) {
	st := &d.Statuses[i]
	switch {
	case st.Shadowed:
		n.shadow++
	case st.Rule.Algorithm == config.AlgEnvoy && st.Code == ratelimit.OK, d.Code == ratelimit.OK:
		n.allowed++
		if st.OverSoft {
			n.overSoft++
		}
		if st.Elastic {
			n.elastic++
		}
	case st.Rule.Algorithm == config.AlgEnvoy:
		n.denied++
	case d.Code == ratelimit.Deferred:
		n.deferred++
	default:
		n.denied++
	}
}

// rowsOf folds deltas into the analytics rows they carry (the newest
// version of each (minute, rule, descriptor, instance, stream), as the
// sink keeps them) and sums them per rule id.
func rowsOf(ds []*eventsv1.Delta) map[string]answers {
	type key struct {
		minute               int64
		rule, desc, instance string
		stream               uint64
	}
	newest := map[key]*eventsv1.Delta{}
	for _, d := range ds {
		m := d.GetMinute()
		if m == nil {
			continue
		}
		k := key{m.MinuteUnix, d.RuleId, d.DescriptorText, d.InstanceId, m.Stream}
		if o := newest[k]; o == nil || o.Sequence < d.Sequence {
			newest[k] = d
		}
	}
	out := map[string]answers{}
	for k, d := range newest {
		m := d.Minute
		n := out[k.rule]
		n.allowed += m.AllowedCount
		n.denied += m.DeniedCount
		n.deferred += m.DeferredCount
		n.shadow += m.ShadowDeniedCount
		n.overSoft += m.OverSoftCount
		n.elastic += m.ElasticCount
		out[k.rule] = n
	}
	return out
}

// answerRig is a checker over src on a MemStore that applies its deltas,
// with a clock at t0.
func answerRig(t *testing.T, src string) (*Checker, *applyProducer, *clock) {
	t.Helper()
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(Config{}, ruleStore(t, src), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	return c, prod, clk
}

// TestEveryAlgorithmModeAndBandCountsAsAnswered (issue 20, items 1 and
// 2): a rule of 2 a minute asked 5 times — the case — reaches
// the analytics rows exactly as its callers were answered, for every
// algorithm, mode, near_limit, shadow_mode and on_exceed the rule format
// accepts: a shadow rule's 3 would-be refusals are shadow-denied and its
// admissions 2 allowed (never denied: the Prometheus decisions metric
// counts allow and shadow_deny apart, and so do analytics), a `mode:
// local` rule's decisions are there at all.
func TestEveryAlgorithmModeAndBandCountsAsAnswered(t *testing.T) {
	type rule struct {
		key  string
		yaml string
	}
	var rules []rule
	const head = "domain: api\npools:\n  - name: p\n    rate_limit: {unit: minute, requests_per_unit: 100}\ndescriptors:\n"
	var file strings.Builder
	file.WriteString(head)
	for _, alg := range config.Algorithms() {
		for _, mode := range []string{"", "sync", "local"} {
			for _, near := range []string{"", "sync", "async"} {
				for _, shadow := range []bool{false, true} {
					for _, defer_ := range []bool{false, true} {
						for _, throttle := range []string{"", "soft", "elastic"} {
							var b strings.Builder
							key := fmt.Sprintf("k%d", len(rules))
							fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {unit: minute, requests_per_unit: 2}\n", key)
							if alg != "" {
								fmt.Fprintf(&b, "    algorithm: %s\n", alg)
							}
							if mode != "" {
								fmt.Fprintf(&b, "    mode: %s\n", mode)
							}
							if near != "" {
								fmt.Fprintf(&b, "    near_limit: %s\n", near)
							}
							if shadow {
								b.WriteString("    shadow_mode: true\n")
							}
							if defer_ {
								b.WriteString("    on_exceed: defer\n    defer: {target: \"http://127.0.0.1:9\"}\n")
							}
							switch throttle {
							case "soft":
								b.WriteString("    throttle: {type: soft, overage_percent: 50}\n")
							case "elastic":
								b.WriteString("    throttle: {type: elastic, pool: p, max_multiplier: 2}\n")
							}
							if _, err := config.ParseRules("one.yaml", []byte(head+b.String())); err != nil {
								continue // a combination the format refuses
							}
							name := fmt.Sprintf("%s mode=%s near_limit=%s shadow=%v defer=%v throttle=%s", alg, mode, near, shadow, defer_, throttle)
							if alg == "" {
								name = "envoy" + name
							}
							rules = append(rules, rule{key, name})
							file.WriteString(b.String())
						}
					}
				}
			}
		}
	}
	c, prod, clk := answerRig(t, file.String())
	want := map[string]*answers{}
	for i := range 5 {
		for _, r := range rules {
			var d ratelimit.Decision
			if err := c.Check(context.Background(), req(1, r.key, "x"), &d); err != nil {
				t.Fatalf("%s: %v", r.yaml, err)
			}
			n := want["api:"+r.key]
			if n == nil {
				n = &answers{}
				want["api:"+r.key] = n
			}
			answeredAs(n, &d, 0)
		}
		clk.ns.Add(int64(time.Millisecond) * int64(i+1))
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := rowsOf(prod.all)
	shadowed, soft, elastic := 0, 0, 0
	for _, r := range rules {
		w := *want["api:"+r.key]
		if g := got["api:"+r.key]; g != w {
			t.Errorf("%s: rows %v, answered %v", r.yaml, g, w)
		}
		if w.overSoft > 0 {
			soft++
		}
		if w.elastic > 0 {
			elastic++
		}
		if strings.Contains(r.yaml, "shadow=true") && strings.HasSuffix(r.yaml, "throttle=") { // a hard limit
			shadowed++
			if w != (answers{allowed: 2, shadow: 3}) {
				t.Errorf("%s: answered %v, want 2 allowed and 3 shadow-denied of 5 at 2 a minute", r.yaml, w)
			}
		}
	}
	t.Logf("%d rules: %d hard shadow rules, %d went over soft limits, %d borrowed", len(rules), shadowed, soft, elastic)
	if shadowed == 0 || soft == 0 || elastic == 0 || len(rules) < 40 {
		t.Fatalf("%d rules, %d shadow rules, %d went over soft limits, %d borrowed: the matrix lost its combinations",
			len(rules), shadowed, soft, elastic)
	}
}

const answerMixRules = `domain: api
pools:
  - name: p
    rate_limit: {unit: minute, requests_per_unit: 1}
descriptors:
  - key: hard
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: wide
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: later
    algorithm: token_bucket
    on_exceed: defer
    defer: {target: "http://127.0.0.1:9"}
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: laterwide
    algorithm: token_bucket
    on_exceed: defer
    defer: {target: "http://127.0.0.1:9"}
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: synclater
    algorithm: sliding_log
    mode: sync
    on_exceed: defer
    defer: {target: "http://127.0.0.1:9"}
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: syncwide
    algorithm: gcra
    mode: sync
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: synchard
    algorithm: fixed_window
    mode: sync
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: localwide
    algorithm: sliding_log
    mode: local
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: envoy
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shadow
    algorithm: sliding_window
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: soft
    algorithm: fixed_window
    throttle: {type: soft, overage_percent: 50}
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: elastic
    algorithm: fixed_window
    throttle: {type: elastic, pool: p, max_multiplier: 3}
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestRequestsOfManyRulesCountAsAnswered (issue 20, item 1): a request
// several rules decide counts under each as its caller was answered. A
// deferring rule's row said "deferred" for requests another rule denied
// (the caller got deny), and a rule that admitted a request another rule
// deferred said "denied"; a `mode: sync` rule's row said "allowed" for a
// request another rule refused (its charge refunded). Over-soft and
// elastic admissions are counted apart, and only when the request was
// admitted.
func TestRequestsOfManyRulesCountAsAnswered(t *testing.T) {
	mixes := [][]string{
		{"hard", "laterwide"},              // hard refuses from the 3rd: the deferring rule's caller is denied
		{"later", "wide"},                  // later defers from the 3rd: wide's caller is deferred
		{"later", "hard"},                  // both refuse: denied (not every refusal defers)
		{"hard", "synclater", "syncwide"},  // the sync rules' charges refunded: denied
		{"syncwide", "synchard"},           // syncwide's charge refunded when synchard refuses: denied
		{"later", "syncwide", "localwide"}, // deferred under the sync and local rules too
		{"hard", "envoy"},                  // Envoy's rule counts as it decided
		{"shadow", "hard"},                 // the shadow rule's own refusals stay shadow-denied
		{"soft", "wide"},                   // admitted over the soft limit, then refused
		{"soft", "hard"},                   // over-soft admissions refused by hard count as denied
		{"elastic", "wide"},                // borrowing from p (1 hit), then refused by the pool
	}
	for _, mix := range mixes {
		t.Run(strings.Join(mix, "+"), func(t *testing.T) {
			c, prod, clk := answerRig(t, answerMixRules)
			want := map[string]*answers{}
			for range 6 {
				var kv []string
				for _, k := range mix {
					kv = append(kv, k, "x")
				}
				var d ratelimit.Decision
				if err := c.Check(context.Background(), req(1, kv...), &d); err != nil {
					t.Fatal(err)
				}
				for j, k := range mix {
					n := want["api:"+k]
					if n == nil {
						n = &answers{}
						want["api:"+k] = n
					}
					answeredAs(n, &d, j)
				}
				clk.ns.Add(int64(time.Millisecond))
			}
			if err := c.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := rowsOf(prod.all)
			for _, k := range mix {
				if g, w := got["api:"+k], *want["api:"+k]; g != w {
					t.Errorf("%s: rows %v, answered %v", k, g, w)
				}
			}
		})
	}
}

// stallingStore holds its first batch of store operations until release
// is closed, saying on entered when it has it.
type stallingStore struct {
	*counters.MemStore
	once             sync.Once
	entered, release chan struct{}
}

func (s *stallingStore) Do(ctx context.Context, ops []*counters.Op) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		<-s.release
	}
	s.MemStore.Do(ctx, ops)
}

// TestChargeAnsweredAfterItsWindowRolledCounts (issue 20, item 1): a
// decision whose store charge is answered after another request on the
// key rolled its window still reaches the analytics (it was left out:
// the answer only fixed the earlier window's count).
func TestChargeAnsweredAfterItsWindowRolledCounts(t *testing.T) {
	ms := counters.NewMemStore()
	st := &stallingStore{MemStore: ms, entered: make(chan struct{}), release: make(chan struct{})}
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0 + int64(999*time.Millisecond))
	ms.SetClock(clk)
	c, err := New(Config{CheckerConfig: config.CheckerConfig{StoreTimeout: time.Minute}}, ruleStore(t, `domain: api
descriptors:
  - key: roll
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 100}
`), st, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan ratelimit.Decision)
	go func() { // a young key: charged in the store, held there
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(1, "roll", "x"), &d); err != nil {
			t.Error(err)
		}
		first <- d
	}()
	<-st.entered
	clk.ns.Store(t0 + int64(time.Second+time.Millisecond)) // the next window
	if d := r0(t, c, "roll"); !d.Allowed() {
		t.Fatalf("second request: %s", codes(d))
	}
	close(st.release)
	if d := <-first; !d.Allowed() {
		t.Fatalf("first request: %s", codes(d))
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rowsOf(prod.all)["api:roll"]; got != (answers{allowed: 2}) {
		t.Fatalf("rows %v, want the 2 admissions", got)
	}
}
