package checker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const analyticsRules = `domain: api
descriptors:
  - key: log
    algorithm: sliding_log
    mode: sync
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: logdefer
    algorithm: sliding_log
    mode: sync
    on_exceed: defer
    defer: {target: "http://127.0.0.1:9"}
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: envoyshadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: shadow
    algorithm: gcra
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: syncshadow
    algorithm: fixed_window
    mode: sync
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: local
    algorithm: fixed_window
    mode: local
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: localenvoy
    mode: local
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: localdefer
    algorithm: leaky_bucket
    mode: local
    on_exceed: defer
    defer: {target: "http://127.0.0.1:9"}
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// counts are a rule's decisions by how the caller was answered.
type counts struct{ allowed, denied, deferred, shadow uint64 }

// TestAnalyticsCountDecisionsAsAnswered (issue 19, item 3): every
// decision reaches the deltas as it was answered — a shadow rule's
// refusals as shadow-denied (Envoy's semantics, a store charge and `mode:
// sync` included: they used to be denied), a deferrable rule's as deferred
// (also under `mode: sync`), `mode: local` decisions at all (they emitted
// nothing) — in deltas every bus accepts (a `sliding_log` delta used to be
// invalid), and analytics-only ones where the counter already holds the
// hits (sync, local).
func TestAnalyticsCountDecisionsAsAnswered(t *testing.T) {
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(Config{}, ruleStore(t, analyticsRules), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"log", "logdefer", "envoyshadow", "shadow", "syncshadow", "local", "localenvoy", "localdefer"}
	answered := map[string]*counts{}
	for i := range 6 {
		for _, k := range keys {
			d := r0(t, c, k)
			n := answered[k]
			if n == nil {
				n = &counts{}
				answered[k] = n
			}
			switch st := d.Statuses[0]; {
			case st.Code == ratelimit.OK && st.Shadowed:
				n.shadow++
			case st.Code == ratelimit.OK:
				n.allowed++
			case st.Code == ratelimit.Deferred:
				n.deferred++
			default:
				n.denied++
			}
		}
		clk.ns.Add(int64(time.Millisecond) * int64(i+1))
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]*counts{}
	for _, d := range prod.all {
		if err := events.Validate(d); err != nil {
			t.Fatalf("delta of %s: %v", d.RuleId, err)
		}
		k := d.RuleId[len("api:"):]
		if (k == "log" || k == "logdefer" || k == "syncshadow" || strings.HasPrefix(k, "local")) && (!d.AlreadyApplied || d.CountedCost != 0) {
			t.Fatalf("delta of %s: already_applied %v, counted %d; its counter holds the hits already", k, d.AlreadyApplied, d.CountedCost)
		}
		n := got[k]
		if n == nil {
			n = &counts{}
			got[k] = n
		}
		n.allowed += d.AllowedCount
		n.denied += d.DeniedCount
		n.deferred += d.DeferredCount
		n.shadow += d.ShadowDeniedCount
	}
	for _, k := range keys {
		if got[k] == nil || *got[k] != *answered[k] {
			t.Errorf("%s: deltas carry %+v, the callers were answered %+v", k, got[k], *answered[k])
		}
	}
	if answered["logdefer"].deferred == 0 || answered["shadow"].shadow == 0 || answered["local"].denied == 0 {
		t.Fatalf("the load did not reach the limits: %+v %+v %+v", *answered["logdefer"], *answered["shadow"], *answered["local"])
	}
}

// r0 decides one one-hit request on key.
func r0(t *testing.T, c *Checker, key string) ratelimit.Decision {
	t.Helper()
	var d ratelimit.Decision
	if err := c.Check(context.Background(), req(1, key, "x"), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDegradedSyncDecisionsAreAnalyticsOnly: a `mode: sync` rule's
// `failure: open` admissions while the store is out go to the analytics
// only; they used to be emitted as unapplied hits, which the aggregator
// added to an async counter nobody reads.
func TestDegradedSyncDecisionsAreAnalyticsOnly(t *testing.T) {
	r := newRig(t, Config{})
	r.store.SetUnavailable(true)
	for range 4 {
		if d := r.check(t, 1, "syncmode", "x"); !d.Allowed() || !d.Statuses[0].Degraded {
			t.Fatalf("failure: open under an outage: %s degraded %v", codes(d), d.Statuses[0].Degraded)
		}
	}
	if err := r.c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var allowed uint64
	for _, d := range r.prod.all {
		if d.RuleId == "api:syncmode" {
			if !d.AlreadyApplied || d.CountedCost != 0 {
				t.Fatalf("degraded sync delta: already_applied %v counted %d, want analytics only", d.AlreadyApplied, d.CountedCost)
			}
			allowed += d.AllowedCount
		}
	}
	if allowed != 4 {
		t.Fatalf("analytics carry %d admissions, want 4", allowed)
	}
}

// TestReleasesAreNoNewDecisions: the drain's release of a deferred
// request is that request's delivery, not another decision: the analytics
// count it once (deferred, when queued); its hits reach allowed_cost once
// admitted. Releases were counted allowed, so the README's 11 requests to
// a 10/s rule showed 11 allowed and 1 deferred. A release of every rule
// the request named is the same (a second rule gained an allowed too).
func TestReleasesAreNoNewDecisions(t *testing.T) {
	const rules = `domain: shop
descriptors:
  - key: user_id
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://127.0.0.1:9"}
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: tier
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(Config{}, ruleStore(t, rules), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(release bool) ratelimit.Code {
		q := req(3, "user_id", "42", "tier", "gold")
		q.Domain, q.Release = "shop", release
		q.Hits = 1
		var d ratelimit.Decision
		if err := c.Check(context.Background(), q, &d); err != nil {
			t.Fatal(err)
		}
		return d.Code
	}
	var codes []string
	for range 3 {
		codes = append(codes, ask(false).String())
	}
	codes = append(codes, ask(true).String()) // "not yet": the window is spent
	clk.ns.Add(int64(time.Second))
	codes = append(codes, ask(true).String()) // released in the next window
	if got := strings.Join(codes, " "); got != "allow allow defer deny allow" {
		t.Fatalf("decisions %s", got)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	type sum struct{ allowed, deferred, denied, allowedCost uint64 }
	got := map[string]sum{}
	for _, d := range prod.all {
		if err := events.Validate(d); err != nil {
			t.Fatalf("delta of %s: %v", d.RuleId, err)
		}
		s := got[d.RuleId]
		s.allowed += d.AllowedCount
		s.deferred += d.DeferredCount
		s.denied += d.DeniedCount
		s.allowedCost += d.AllowedCost
		got[d.RuleId] = s
	}
	want := sum{allowed: 2, deferred: 1, allowedCost: 3}
	for _, id := range []string{"shop:user_id", "shop:tier"} {
		if got[id] != want {
			t.Errorf("%s: %+v, want %+v (the release is the deferred request's delivery)", id, got[id], want)
		}
	}
}
