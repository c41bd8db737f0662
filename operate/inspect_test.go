package operate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// hashRules has rules that hash their values (checker's own tests keep
// the same rules).
const hashRules = `domain: api
descriptors:
  - key: api_key
    hash_values: true
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: user
        hash_values: true
        algorithm: fixed_window
        rate_limit: {unit: second, requests_per_unit: 5}
`

// TestInspect: the local and the store view of a window counter, hashed
// values included; a bucket through a probe.
func TestInspect(t *testing.T) {
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c := newNode(t, checker.Config{CheckerConfig: config.CheckerConfig{HashKey: "k"}}, ruleStore(t, hashRules+`  - key: bucket
    algorithm: token_bucket
    rate_limit: {unit: second, requests_per_unit: 5}
`), ms, prod, clk)
	ctx := context.Background()
	es := []config.Entry{{Key: "api_key", Value: "sk_live_SECRET"}}
	st, err := c.Inspect(ctx, "api", es)
	if err != nil || st.Local != nil || st.Global.Found || st.Global.Remaining != 2 || strings.Contains(st.CounterKey, "SECRET") {
		t.Fatalf("unknown key: %+v %v", st, err)
	}
	var d ratelimit.Decision
	if err := c.Check(ctx, req(1, "api_key", "sk_live_SECRET"), &d); err != nil {
		t.Fatal(err)
	}
	st, err = c.Inspect(ctx, "api", es)
	if err != nil || st.Local == nil || st.Local.Mine != 1 || st.Local.Remaining != 1 {
		t.Fatalf("after one hit, before the flush: %+v %+v %v", st, st.Local, err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = c.Inspect(ctx, "api", es)
	if err != nil || !st.Global.Found || st.Global.Total != 1 || st.Global.Remaining != 1 || st.Global.Instances != 1 {
		t.Fatalf("after the flush: %+v %v", st.Global, err)
	}
	for _, bad := range []struct {
		domain string
		es     []config.Entry
		is     error
	}{
		{"nope", es, ratelimit.ErrUnknownDomain},
		{"api", []config.Entry{{Key: "unknown", Value: "x"}}, ErrNoRule},
	} {
		if _, err := c.Inspect(ctx, bad.domain, bad.es); !errors.Is(err, bad.is) {
			t.Fatalf("%s %v: got %v, want %v", bad.domain, bad.es, err, bad.is)
		}
	}
	// A bucket is shown by a zero-cost probe: nothing is consumed.
	bucket := []config.Entry{{Key: "bucket", Value: "x"}}
	if err := c.Check(ctx, req(2, "bucket", "x"), &d); err != nil {
		t.Fatal(err)
	}
	before := c.Snapshot().Decisions
	for range 2 {
		st, err = c.Inspect(ctx, "api", bucket)
		if err != nil || st.Probe == nil || st.Probe.Remaining != 3 || !st.Probe.Allowed || st.Probe.Scope != "this checker" || st.Local != nil {
			t.Fatalf("bucket: %+v %+v %v", st, st.Probe, err)
		}
	}
	if after := c.Snapshot().Decisions; after != before {
		t.Fatalf("inspecting counted %d decisions", after-before)
	}
	// A bucket this checker does not hold: the store's view (empty: full).
	st, err = c.Inspect(ctx, "api", []config.Entry{{Key: "bucket", Value: "never-seen"}})
	if err != nil || st.Probe == nil || st.Probe.Remaining != 5 || st.Probe.Scope != "all checkers" {
		t.Fatalf("unheld bucket: %+v %v", st.Probe, err)
	}
}
