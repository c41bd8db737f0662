package checker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/plantable"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestPlansEveryAlgorithm: under a rule with plans each client is held to
// its plan's limit, a client without one (or whose plan the rule does not
// name) to the rule's own, and a client moved to another plan mid-window
// keeps what it spent, on every algorithm and mode.
func TestPlansEveryAlgorithm(t *testing.T) {
	// upgraded is what a client that spent its 2 (and was refused once)
	// gets in 4 requests once it is moved to plan pro (5): a window's
	// count is kept (Envoy's charged the refused request too); a bucket
	// spent is empty, and refills at pro's rate.
	const window, envoy, bucket = "allow allow allow deny", "allow allow deny deny", "deny deny deny deny"
	cases := []struct{ name, ext, upgraded string }{
		{"envoy", "", envoy},
		{"fixed_window", "algorithm: fixed_window", window},
		{"sliding_window", "algorithm: sliding_window", window},
		{"token_bucket", "algorithm: token_bucket", bucket},
		{"gcra", "algorithm: gcra", bucket},
		{"leaky_bucket", "algorithm: leaky_bucket", bucket},
		{"sliding_log sync", "algorithm: sliding_log\n    mode: sync", window},
		{"fixed_window sync", "algorithm: fixed_window\n    mode: sync", window},
		{"fixed_window local", "algorithm: fixed_window\n    mode: local", window},
		{"near_limit async", "algorithm: fixed_window\n    near_limit: async", window},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := fmt.Sprintf(`domain: api
descriptors:
  - key: api_key
    %s
    rate_limit: {unit: hour, requests_per_unit: 2}
    plans: {table: customers, limits: {pro: 5, none: 0}}
`, c.ext)
			tables := &plantable.Tables{}
			rg := newRigRules(t, Config{InstanceName: "c", Plans: tables}, src)
			ck := rg.c
			tb := plantable.New()
			set := func(client, plan string) {
				t.Helper()
				if err := tb.Apply([]plantable.Change{{Key: tb.Key([]string{client}), Plan: plan}}); err != nil {
					t.Fatal(err)
				}
			}
			set("acme", "pro")
			set("gone", "none")
			set("odd", "gold") // a plan the rule does not name
			tables.Set("api", "customers", tb)
			tb.Publish()
			steps := []struct {
				client string
				n      int
				want   string
			}{
				{"acme", 6, "allow allow allow allow allow deny"},
				{"free", 3, "allow allow deny"},
				{"gone", 1, "deny"},
				{"odd", 3, "allow allow deny"},
			}
			for _, s := range steps {
				if got := run(t, ck, s.n, "api_key", s.client); got != s.want {
					t.Fatalf("%s: %s, want %s", s.client, got, s.want)
				}
			}
			set("free", "pro") // a client upgraded mid-window keeps its 2 spent
			if got := run(t, ck, 4, "api_key", "free"); got != c.upgraded {
				t.Fatalf("free upgraded to pro: %s, want %s", got, c.upgraded)
			}
			set("acme", "") // removed: back to the rule's own limit, 5 spent already
			if got := run(t, ck, 1, "api_key", "acme"); got != "deny" {
				t.Fatalf("acme downgraded: %s", got)
			}
		})
	}
}

// TestPlansOperatorControlWins: an operator's control on a client's key
// decides over the client's plan.
func TestPlansOperatorControlWins(t *testing.T) {
	tables := &plantable.Tables{}
	rg := newRigRules(t, Config{InstanceName: "c", Plans: tables}, "domain: api\ndescriptors:\n  - key: api_key\n    algorithm: fixed_window\n    rate_limit: {unit: hour, requests_per_unit: 2}\n    plans: {table: customers, limits: {pro: 50}}\n")
	ck := rg.c
	tb := plantable.New()
	_ = tb.Apply([]plantable.Change{{Key: tb.Key([]string{"acme"}), Plan: "pro"}})
	tables.Set("api", "customers", tb)
	ctx := context.Background()
	if err := rg.store.PutControl(ctx, counters.Control{Domain: "api", Rule: "api:api_key", Entries: []config.Entry{{Key: "api_key", Value: "acme"}},
		Action: counters.ActionLimit, Limit: 3}); err != nil {
		t.Fatal(err)
	}
	if err := ck.SyncControls(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, ck, 4, "api_key", "acme"); got != "allow allow allow deny" {
		t.Fatalf("acme under a control of 3: %s", got)
	}
}

// TestPlansBorrowFromThePool: an elastic rule's plan borrows from the
// rule's pool as the rule does — capped by the pool, flagged elastic.
func TestPlansBorrowFromThePool(t *testing.T) {
	tables := &plantable.Tables{}
	rg := newRigRules(t, Config{InstanceName: "c", Plans: tables}, `domain: api
pools:
  - name: shared
    rate_limit: {unit: hour, requests_per_unit: 1}
descriptors:
  - key: api_key
    algorithm: fixed_window
    throttle: {type: elastic, pool: shared, max_multiplier: 3}
    rate_limit: {unit: hour, requests_per_unit: 10}
    plans: {table: customers, limits: {pro: 2}}
`)
	ck := rg.c
	tb := plantable.New()
	_ = tb.Apply([]plantable.Change{{Key: tb.Key([]string{"p"}), Plan: "pro"}})
	tables.Set("api", "customers", tb)
	var flags []string
	for range 4 {
		var d ratelimit.Decision
		if err := ck.Check(context.Background(), req(1, "api_key", "p"), &d); err != nil {
			t.Fatal(err)
		}
		st := d.Statuses[0]
		flags = append(flags, fmt.Sprintf("%s/elastic=%v/soft=%v", st.Code, st.Elastic, st.OverSoft))
	}
	// 2 of its own, 1 borrowed (the pool holds 1), then refused
	want := "allow/elastic=false/soft=false allow/elastic=false/soft=false allow/elastic=true/soft=false deny/elastic=false/soft=false"
	if got := strings.Join(flags, " "); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
