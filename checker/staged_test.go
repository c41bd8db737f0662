package checker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestStagedRulesDecideBeside: a request of a domain with staged rules is
// answered by the live rules alone, and decided under the staged ones
// too, whose counters count it; a replayed request id, a probe of the
// staged domain itself and a deferred release are not decided twice.
func TestStagedRulesDecideBeside(t *testing.T) {
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	var files []*config.File
	for _, src := range []string{
		"domain: api\ndescriptors:\n  - key: user\n    algorithm: fixed_window\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
		"domain: api#staged\ndescriptors:\n  - key: user\n    algorithm: fixed_window\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
	} {
		f, err := config.ParseRules("r.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		f.Staged = strings.HasSuffix(f.Domain, config.StagedSuffix) // as rulesync marks a staged version's
		files = append(files, f)
	}
	rs, err := config.Compile(files)
	if err != nil {
		t.Fatal(err)
	}
	rules := config.NewStore(rs)
	c, err := New(Config{InstanceName: "c", CheckerConfig: config.CheckerConfig{}, IdempotencyTTL: time.Minute}, rules, ms, &applyProducer{store: ms}, clk)
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, c, 4, "user", "priya"); got != "allow allow allow allow" {
		t.Fatalf("live answers under staged rules: %s", got)
	}
	probe := func(domain string) int64 {
		t.Helper()
		r := req(0, "user", "priya")
		r.Domain = domain
		var d ratelimit.Decision
		if _, err := c.checkOne(context.Background(), r, &d); err != nil { // the staged domain is no client's to ask
			t.Fatal(err)
		}
		return d.Statuses[0].Remaining
	}
	if got := probe("api"); got != 1 {
		t.Fatalf("live remaining %d after 4 of 5", got)
	}
	if got := probe("api#staged"); got != 0 {
		t.Fatalf("staged remaining %d after 4 requests under 2: the staged rules did not count them", got)
	}
	// a deferred release is the live rules' business alone
	r := req(1, "user", "sam")
	r.Release = true
	var d ratelimit.Decision
	if err := c.Check(context.Background(), r, &d); err != nil {
		t.Fatal(err)
	}
	if got := probe("api#staged"); got != 0 {
		t.Fatal("probe changed")
	}
	sr := req(0, "user", "sam")
	sr.Domain = "api#staged"
	if _, err := c.checkOne(context.Background(), sr, &d); err != nil || d.Statuses[0].Remaining != 2 {
		t.Fatalf("a release was decided under the staged rules: remaining %d %v", d.Statuses[0].Remaining, err)
	}
	// a client asking the staged domain is told it does not exist
	if err := c.Check(context.Background(), sr, &d); !errors.Is(err, ratelimit.ErrUnknownDomain) {
		t.Fatalf("a client asked the staged domain: %v", err)
	}
	// a retry answered from the request id's memory is not decided again
	// under the staged rules
	rid := req(1, "user", "rid")
	rid.RequestID = "same-1"
	for range 3 {
		if err := c.Check(context.Background(), rid, &d); err != nil {
			t.Fatal(err)
		}
	}
	rr := req(0, "user", "rid")
	rr.Domain = "api#staged"
	if _, err := c.checkOne(context.Background(), rr, &d); err != nil || d.Statuses[0].Remaining != 1 {
		t.Fatalf("three tries of one request id: the staged counter has %d of 2 left, want 1", d.Statuses[0].Remaining)
	}
}
