package dryrun

import (
	"fmt"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/plantable"
	"github.com/velvetrope/velvetrope/sink"
)

const proposed = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: token
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tb
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: open
    rate_limit: {unlimited: true}
`

// t0 is an hour's start (unix seconds).
const t0 = 1796378400

func compile(t *testing.T, doc string) *config.RuleSet {
	t.Helper()
	f, err := config.ParseRules("proposed.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// Rows is the usage a dry run reads: per key, minutes in order.
var rows = []sink.Demand{
	{Minute: t0, Descriptor: "ip=1", Allowed: 6},
	{Minute: t0 + 60, Descriptor: "ip=1", Allowed: 3},
	{Minute: t0 + 3600, Descriptor: "ip=1", Allowed: 12},
	{Minute: t0, Descriptor: "open=o", Allowed: 50},
	{Minute: t0, Descriptor: "other=z", Allowed: 7},
	{Minute: t0, Descriptor: "tb=k", Allowed: 5},
	{Minute: t0 + 60, Descriptor: "tb=k", Allowed: 1},
	{Minute: t0 + 180, Descriptor: "tb=k", Allowed: 4},
	{Minute: t0, Descriptor: "token=x", Allowed: 90},
	{Minute: t0, Descriptor: "user=a", Allowed: 8},
	{Minute: t0 + 60, Descriptor: "user=a", Allowed: 4},
	{Minute: t0, Descriptor: "user=b", Allowed: 5, Denied: 4},
	{Minute: t0, Descriptor: `user=c\,d`, Allowed: 2, Deferred: 1, AllowedCost: 6, DeniedCost: 0}, // heavier requests
}

// TestEvaluate holds every rule kind to counts computed by hand:
//   - user (5 a minute, exact): a's 8 then 4 → 3; b's 9 → 4 (4 refused
//     now); c,d's 3 requests of 6 hits → 1 hit over, a request of 2 → 1
//   - ip (10 an hour, exact): 6 + 3 in the first hour, 12 in the next → 2
//   - token (1 a second, estimated): 90 in a minute of 60 → 30
//   - tb (a bucket of 2 a minute, estimated): full 2 of 5 → 3; 1 of the
//     2 refilled → 0; two minutes later min(2, 1+4) of 4 → 2: 5 in all
//   - open (unlimited): 0; other=z matches no rule: unmatched
func TestEvaluate(t *testing.T) {
	rep, err := Evaluate(compile(t, proposed), "api", rows, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Keys != 8 || rep.Requests != (6+3+12)+50+7+(5+1+4)+90+(8+4)+9+3 || rep.Unmatched != 7 {
		t.Fatalf("keys %d, requests %d, unmatched %d", rep.Keys, rep.Requests, rep.Unmatched)
	}
	want := map[string]string{
		"api:user":  "requests 24 would_deny 8 denied_now 5 exact true top [user=b:4 user=a:3 user=c\\,d:1]",
		"api:ip":    "requests 21 would_deny 2 denied_now 0 exact true top [ip=1:2]",
		"api:token": "requests 90 would_deny 30 denied_now 0 exact false top [token=x:30]",
		"api:tb":    "requests 10 would_deny 5 denied_now 0 exact false top [tb=k:5]",
		"api:open":  "requests 50 would_deny 0 denied_now 0 exact true top [open=o:0]",
	}
	if len(rep.Rules) != len(want) {
		t.Fatalf("%d rules reported, want %d", len(rep.Rules), len(want))
	}
	for _, r := range rep.Rules {
		var top []string
		for _, k := range r.TopKeys {
			top = append(top, fmt.Sprintf("%s:%d", k.Descriptor, k.WouldDeny))
		}
		got := fmt.Sprintf("requests %d would_deny %d denied_now %d exact %v top %v", r.Requests, r.WouldDeny, r.DeniedNow, r.Exact, top)
		if got != want[r.Rule] {
			t.Errorf("%s: %s\nwant %s", r.Rule, got, want[r.Rule])
		}
		if r.Method == "" {
			t.Errorf("%s: no method", r.Rule)
		}
	}
	if _, err := Evaluate(compile(t, proposed), "web", rows, nil); err == nil {
		t.Fatal("a domain the document lacks was evaluated")
	}
}

// TestEvaluateEdges: no usage, a blocking rule, a shadow rule, a soft
// throttle's ceiling.
func TestEvaluateEdges(t *testing.T) {
	doc := `domain: api
descriptors:
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: soft
    algorithm: fixed_window
    throttle: {type: soft, overage_percent: 50}
    rate_limit: {unit: minute, requests_per_unit: 4}
`
	rs := compile(t, doc)
	rep, err := Evaluate(rs, "api", nil, nil)
	if err != nil || rep.Requests != 0 || len(rep.Rules) != 3 || rep.Rules[0].TopKeys == nil {
		t.Fatalf("no usage: %+v, %v", rep, err)
	}
	rep, err = Evaluate(rs, "api", []sink.Demand{
		{Minute: t0, Descriptor: "blocked=x", Allowed: 3},
		{Minute: t0, Descriptor: "shadow=y", Allowed: 3},
		{Minute: t0, Descriptor: "soft=z", Allowed: 9},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range rep.Rules {
		got[r.Rule] = r.WouldDeny
		if r.Rule == "api:shadow" && !r.Shadow {
			t.Error("the shadow rule is not marked")
		}
	}
	if got["api:blocked"] != 3 || got["api:shadow"] != 2 || got["api:soft"] != 3 { // soft: 4 + 50 % = 6 admitted of 9
		t.Fatalf("would deny %v", got)
	}
}

// TestEvaluatePlans: a rule with plans replays each client at its plan's
// limit, reported under the rule: a (plan big, 100 a minute) is refused
// nothing of its 8 then 4, b (no plan: 5) 4 of its 9.
func TestEvaluatePlans(t *testing.T) {
	rs := compile(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    plans: {table: t, limits: {big: 100}}\n")
	tb := plantable.New()
	if err := tb.Apply([]plantable.Change{{Key: tb.Key([]string{"a"}), Plan: "big"}}); err != nil {
		t.Fatal(err)
	}
	var ts plantable.Tables
	ts.Set("api", "t", tb)
	rows := []sink.Demand{
		{Minute: t0, Descriptor: "user=a", Allowed: 8},
		{Minute: t0 + 60, Descriptor: "user=a", Allowed: 4},
		{Minute: t0, Descriptor: "user=b", Allowed: 5, Denied: 4},
	}
	for _, c := range []struct {
		plans func(*config.Rule, []config.Entry) *config.Rule
		want  int64
	}{{ts.Resolve, 4}, {nil, 3 + 4}} {
		rep, err := Evaluate(rs, "api", rows, c.plans)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Rules) != 1 || rep.Rules[0].WouldDeny != c.want || !strings.Contains(rep.Rules[0].Method, "each client at its plan's limit") {
			t.Fatalf("plans %v: %+v, want %d refused", c.plans != nil, rep.Rules, c.want)
		}
	}
}

// TestEvaluateSeveralLimits: each limit of a descriptor is its own report
// line: a's 8 then 4 in two minutes under 5 a minute (3 refused) and 10 an
// hour (2 refused).
func TestEvaluateSeveralLimits(t *testing.T) {
	rs := compile(t, "domain: api\ndescriptors:\n  - key: user\n    algorithm: fixed_window\n    limits:\n      - {unit: minute, requests_per_unit: 5}\n      - {unit: hour, requests_per_unit: 10}\n")
	rep, err := Evaluate(rs, "api", []sink.Demand{
		{Minute: t0, Descriptor: "user=a", Allowed: 8},
		{Minute: t0 + 60, Descriptor: "user=a", Allowed: 4},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range rep.Rules {
		got[r.Rule] = r.WouldDeny
		if r.Requests != 12 || !strings.Contains(r.Method, "replayed alone") {
			t.Fatalf("%+v", r)
		}
	}
	if len(got) != 2 || got["api:user"] != 3 || got["api:user:#limit:hour"] != 2 {
		t.Fatalf("would deny %v", got)
	}
}
