package checker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// deferInvariant checks what a decision may say about deferral: Deferred
// only when every refusing status is Deferred under a rule that defers
// (and could admit the request some day), OverLimit whenever any status
// refuses otherwise, and no Deferred status in a decision that is not.
func deferInvariant(d *ratelimit.Decision) error {
	deferredSeen := false
	for i, st := range d.Statuses {
		switch st.Code {
		case ratelimit.Deferred:
			deferredSeen = true
			if d.Code != ratelimit.Deferred {
				return fmt.Errorf("status %d deferred in a %v decision", i, d.Code)
			}
			if st.Rule == nil || st.Rule.OnExceed != config.ExceedDefer || st.RetryNever {
				id := "(none)"
				if st.Rule != nil {
					id = st.Rule.ID
				}
				return fmt.Errorf("status %d deferred under rule %s (retry never: %v), which does not defer it", i, id, st.RetryNever)
			}
		case ratelimit.OverLimit:
			if d.Code != ratelimit.OverLimit {
				return fmt.Errorf("status %d refuses (rule %v) in a %v decision", i, st.Rule.ID, d.Code)
			}
		}
	}
	if d.Code == ratelimit.Deferred && !deferredSeen {
		return fmt.Errorf("a deferred decision with no deferring status")
	}
	return nil
}

// TestDeferOnlyUnderADeferringRule: issue 19, item 4. An elastic rule
// whose pool was spent was answered Deferred (the pool's refusal was
// marked on its borrower after the checker asked whether the request
// defers), in a domain with no deferring rule: the ticket then failed in
// the drain and the work was lost. Over every combination the rule format
// accepts of throttle × pool state × on_exceed × algorithm × mode, on both
// engines, a refusal is Deferred exactly when the rule that refuses defers
// — alone, beside a deferring or a denying descriptor — and never for a
// release nor where the caller cannot queue (NoDefer: Envoy's API, an API
// without a queue). Combinations the format refuses are named.
func TestDeferOnlyUnderADeferringRule(t *testing.T) {
	type combo struct {
		throttle, pool, onExceed, alg, mode string
	}
	throttles := map[string]string{
		"hard":    "",
		"soft":    "throttle: {type: soft, overage_percent: 50}",
		"elastic": "throttle: {type: elastic, pool: p, max_multiplier: 2}",
	}
	// what a victim admits before its first refusal (limit 2)
	admits := map[string]int{"hard": 2, "soft": 3, "elastic/room": 4, "elastic/spent": 2}
	// combinations the rule format refuses, by the reason it gives
	refused := func(c combo) string {
		switch {
		case c.onExceed == "defer" && c.alg == "":
			return "on_exceed defer needs an explicit algorithm"
		case c.alg == "sliding_log" && c.mode == "async":
			return "sliding_log needs mode sync or local"
		case c.throttle == "elastic" && c.alg != "fixed_window" && c.alg != "sliding_window":
			return "elastic throttling needs algorithm fixed_window or sliding_window"
		case c.throttle == "elastic" && c.mode != "async":
			return "elastic throttling needs mode async"
		case c.throttle == "elastic" && c.onExceed == "defer":
			return "elastic throttling and on_exceed defer do not combine"
		}
		return ""
	}
	var combos []combo
	for _, th := range []string{"hard", "soft", "elastic"} {
		pools := []string{"n/a"}
		if th == "elastic" {
			pools = []string{"room", "spent"}
		}
		for _, pl := range pools {
			for _, oe := range []string{"", "deny", "defer"} { // "": on_exceed left out
				for _, alg := range []string{"", "fixed_window", "sliding_window", "token_bucket", "gcra", "leaky_bucket", "sliding_log"} {
					for _, mode := range []string{"async", "sync", "local"} {
						combos = append(combos, combo{th, pl, oe, alg, mode})
					}
				}
			}
		}
	}
	accepted := 0
	for _, c := range combos {
		name := fmt.Sprintf("%s/pool=%s/on_exceed=%s/alg=%s/mode=%s", c.throttle, c.pool, c.onExceed, c.alg, c.mode)
		var ext []string
		if c.alg != "" {
			ext = append(ext, "algorithm: "+c.alg)
		}
		if throttles[c.throttle] != "" {
			ext = append(ext, throttles[c.throttle])
		}
		if c.onExceed != "" {
			ext = append(ext, "on_exceed: "+c.onExceed)
		}
		if c.onExceed == "defer" {
			ext = append(ext, `defer: {target: "http://target.test"}`)
		}
		if c.mode != "async" {
			ext = append(ext, "mode: "+c.mode)
		}
		poolCap := 1000
		if c.pool == "spent" {
			poolCap = 2
		}
		yaml := fmt.Sprintf(`domain: m
pools:
  - name: p
    rate_limit: {unit: hour, requests_per_unit: %d}
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 2}
%s
  - key: d
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://target.test"}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: n
    algorithm: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 1}
`, poolCap, "    "+strings.Join(ext, "\n    "))
		f, err := config.ParseRules("m.yaml", []byte(yaml))
		var rs *config.RuleSet
		if err == nil {
			rs, err = config.Compile([]*config.File{f})
		}
		if why := refused(c); why != "" {
			if err == nil || !strings.Contains(err.Error(), why) {
				t.Fatalf("%s: the rule format accepted it (%v), want it refused: %s", name, err, why)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: refused by the rule format: %v", name, err)
		}
		accepted++
		for _, engine := range []string{"async", "local"} {
			t.Run(name+"/"+engine, func(t *testing.T) {
				check := matrixEngine(t, engine, rs)
				step := 0
				noDefer := false
				decide := func(release bool, kv ...string) ratelimit.Decision {
					t.Helper()
					q := req(1, kv...)
					q.Domain, q.Release, q.NoDefer = "m", release, noDefer
					var d ratelimit.Decision
					if err := check(q, &d); err != nil {
						t.Fatalf("step %d %v: %v", step, kv, err)
					}
					if err := deferInvariant(&d); err != nil {
						t.Fatalf("step %d %v: %s: %v", step, kv, codes(d), err)
					}
					step++
					return d
				}
				until := func(kv ...string) (admitted int, d ratelimit.Decision) {
					t.Helper()
					for range 10 {
						if d = decide(false, kv...); !d.Allowed() {
							return
						}
						admitted++
					}
					t.Fatalf("%v: never refused", kv)
					return
				}
				if c.pool == "spent" {
					until("k", "spender") // 2 of its own and the pool's 2
				}
				key := c.throttle
				if c.throttle == "elastic" {
					key += "/" + c.pool
				}
				a, d := until("k", "victim")
				want := ratelimit.OverLimit
				if c.onExceed == "defer" {
					want = ratelimit.Deferred
				}
				if a != admits[key] || d.Code != want || d.Statuses[0].Code != want {
					t.Fatalf("admitted %d, then %s; want %d admitted, then %v", a, codes(d), admits[key], want)
				}
				until("d", "x")
				until("n", "y")
				if d := decide(false, "k", "victim", "d", "x"); d.Code != want {
					t.Fatalf("beside a deferring refusal: %s, want %v", codes(d), want)
				}
				if d := decide(false, "k", "victim", "n", "y"); d.Code != ratelimit.OverLimit {
					t.Fatalf("beside a denying refusal: %s, want deny", codes(d))
				}
				if d := decide(false, "d", "x", "k", "fresh-"+engine); d.Code != ratelimit.Deferred || d.Statuses[1].Code != ratelimit.OK {
					t.Fatalf("a deferring refusal beside an admission: %s, want defer: allow", codes(d))
				}
				if d := decide(true, "k", "victim"); d.Code != ratelimit.OverLimit {
					t.Fatalf("a release: %s, want deny", codes(d))
				}
				noDefer = true // the caller cannot queue (Envoy's API, no queue)
				if d := decide(false, "k", "victim"); d.Code != ratelimit.OverLimit {
					t.Fatalf("where nothing queues: %s, want deny", codes(d))
				}
				if d := decide(false, "d", "x", "k", "victim"); d.Code != ratelimit.OverLimit {
					t.Fatalf("a deferring refusal where nothing queues: %s, want deny", codes(d))
				}
			})
		}
	}
	if accepted < 40 {
		t.Fatalf("only %d combinations accepted by the rule format: the matrix lost its cases", accepted)
	}
}

// matrixEngine is a fresh engine over rs: the async checker on a
// MemStore (deltas applied at once), or the local engine.
func matrixEngine(t *testing.T, engine string, rs *config.RuleSet) func(*ratelimit.Request, *ratelimit.Decision) error {
	t.Helper()
	clk := &clock{}
	clk.ns.Store(t0)
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

// TestNoDeferCountsDenied: where nothing queues (NoDefer: Envoy's API),
// a refusal by a deferring rule is counted denied in the deltas, not
// deferred; where the caller queues, deferred.
func TestNoDeferCountsDenied(t *testing.T) {
	f, err := config.ParseRules("m.yaml", []byte(`domain: m
descriptors:
  - key: d
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://target.test"}
    rate_limit: {unit: hour, requests_per_unit: 1}
`))
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
	prod := &applyProducer{store: ms}
	c, err := checker.New(checker.Config{}, config.NewStore(rs), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	for i, noDefer := range []bool{false, false, true, true, true} {
		q := req(1, "d", "x")
		q.Domain, q.NoDefer = "m", noDefer
		var d ratelimit.Decision
		if err := c.Check(context.Background(), q, &d); err != nil {
			t.Fatal(err)
		}
		if i > 0 && (d.Code == ratelimit.Deferred) == noDefer {
			t.Fatalf("step %d (no defer %v): %s", i, noDefer, codes(d))
		}
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var denied, deferredN uint64
	prod.mu.Lock()
	for _, dl := range prod.all {
		denied += dl.DeniedCount
		deferredN += dl.DeferredCount
	}
	prod.mu.Unlock()
	if denied != 3 || deferredN != 1 {
		t.Fatalf("deltas count %d denied and %d deferred, want 3 and 1", denied, deferredN)
	}
}
