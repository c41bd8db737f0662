package rulesync

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/plantable"
	"github.com/velvetrope/velvetrope/rulestore"
)

const plansDoc = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 1}
    plans: {table: customers, limits: {pro: 100, ent: 1000}}
`

func plansRules(t *testing.T, src string) *config.RuleSet {
	t.Helper()
	f, err := config.ParseRules("r.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// waitFor polls cond (the followers' goroutines, not time, are awaited).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestClientsFollowTheTables: a table the rules name is loaded, a change
// reaches it through the log, a follower the log left behind scans again
// and loses nothing, and a table no rule names any more is dropped.
func TestClientsFollowTheTables(t *testing.T) {
	ctx := context.Background()
	store, _ := rulestore.NewMemory(rulestore.Options{})
	if _, err := store.SetClients(ctx, "api", "customers", []rulestore.ClientChange{{Client: []string{"acme"}, Plan: "pro"}}); err != nil {
		t.Fatal(err)
	}
	live := config.NewStore(plansRules(t, plansDoc))
	tables := &plantable.Tables{}
	c := NewClients(store, live, tables, ClientsOptions{Wait: time.Hour, Rules: time.Millisecond})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	rule := live.Load().Rules()[0]
	limit := func(client string) int64 {
		return tables.Resolve(rule, []config.Entry{{Key: "api_key", Value: client}}).Limit
	}
	waitFor(t, "acme on pro", func() bool { return limit("acme") == 100 })
	if err := c.Ready(); err != nil {
		t.Fatal(err)
	}
	// the log's wait is an hour: only a write wakes the follower
	start := time.Now()
	if _, err := store.SetClients(ctx, "api", "customers", []rulestore.ClientChange{{Client: []string{"acme"}, Plan: "ent"}, {Client: []string{"zed"}, Plan: "pro"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "acme on ent", func() bool { return limit("acme") == 1000 && limit("zed") == 100 })
	t.Logf("a change applied after %v", time.Since(start))

	// past the log: more changes than it keeps, written while the
	// follower is stopped
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for b := 0; b*rulestore.MaxClientChanges <= rulestore.ClientLogChanges+rulestore.MaxClientChanges; b++ {
		cs := make([]rulestore.ClientChange, rulestore.MaxClientChanges)
		for i := range cs {
			cs[i] = rulestore.ClientChange{Client: []string{"c" + strconv.Itoa(i)}, Plan: "pro"}
		}
		if _, err := store.SetClients(ctx, "api", "customers", cs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.SetClients(ctx, "api", "customers", []rulestore.ClientChange{{Client: []string{"acme"}, Plan: ""}}); err != nil {
		t.Fatal(err)
	}
	c2 := NewClients(store, live, tables, ClientsOptions{Wait: time.Hour, Rules: time.Millisecond})
	f := &tableFollower{key: config.PlanTable{Domain: "api", Table: "customers"}, done: make(chan struct{})}
	old := tables.Get("api", "customers")
	f.table.Store(old)
	f.seq.Store(3) // where the stopped follower was
	fctx, cancel := context.WithCancel(ctx)
	go c2.follow(fctx, f)
	waitFor(t, "the rescan", func() bool { return f.scans.Load() == 1 && tables.Get("api", "customers") != old })
	cancel()
	<-f.done
	if limit("acme") != 1 || limit("c9999") != 100 || limit("zed") != 100 {
		t.Fatalf("after the rescan: acme %d (removed: 1), c9999 %d, zed %d", limit("acme"), limit("c9999"), limit("zed"))
	}

	// the rules drop the plans: the table goes
	c3 := NewClients(store, live, tables, ClientsOptions{Wait: time.Hour, Rules: time.Millisecond})
	if err := c3.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c3.Stop(ctx)
	waitFor(t, "c3 loads", func() bool { st := c3.Status(); return len(st) == 1 && st[0].Loaded && st[0].Clients == 10001 })
	live.Swap(plansRules(t, "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	waitFor(t, "the table dropped", func() bool { return tables.Get("api", "customers") == nil && len(c3.Status()) == 0 })
}

// TestStagedVersionSources: a staged version leaves its live document in
// force and compiles its own under the staged domain, where a defer
// becomes a refusal; promoting it (a live write of its document) ends
// the staging.
func TestStagedVersionSources(t *testing.T) {
	live := config.NewStore(plansRules(t, "domain: other\ndescriptors: []\n"))
	src := NewSources(live, nil)
	doc := func(n int, deferred bool) string {
		s := "domain: shop\ndescriptors:\n  - key: user\n    algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: " + strconv.Itoa(n) + "}\n"
		if deferred {
			s += "    on_exceed: defer\n    defer: {target: \"http://t.example\"}\n"
		}
		return s
	}
	limit := func(domain string) (int64, config.OnExceed) {
		r := live.Load().Match(domain, []config.Entry{{Key: "user", Value: "u"}})
		if r == nil {
			return -1, ""
		}
		return r.Limit, r.OnExceed
	}
	steps := []struct {
		v              rulestore.Version
		live, staged   int64
		stagedOnExceed config.OnExceed
	}{
		{rulestore.Version{Domain: "shop", Version: 1, Body: doc(10, false)}, 10, -1, ""},
		{rulestore.Version{Domain: "shop", Version: 2, Body: doc(3, true), Stage: rulestore.StageShadow, LiveVersion: 1, LiveBody: doc(10, false)}, 10, 3, config.ExceedDeny},
		{rulestore.Version{Domain: "shop", Version: 3, Body: doc(3, true)}, 3, -1, ""},
		{rulestore.Version{Domain: "shop", Version: 4, Body: doc(7, false), Stage: rulestore.StageShadow, LiveVersion: 3, LiveBody: doc(3, true)}, 3, 7, config.ExceedDeny},
	}
	for i, s := range steps {
		if err := src.Apply(s.v); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		l, _ := limit("shop")
		sl, so := limit("shop#staged")
		if l != s.live || sl != s.staged || (s.staged >= 0 && so != s.stagedOnExceed) {
			t.Fatalf("step %d: live %d, staged %d (%s); want %d, %d", i, l, sl, so, s.live, s.staged)
		}
		if name, ok := live.Load().Staged("shop"); ok != (s.staged >= 0) || (ok && name != "shop#staged") {
			t.Fatalf("step %d: Staged = %q %v", i, name, ok)
		}
	}
	if _, so := limit("shop"); so != config.ExceedDefer {
		t.Fatal("the live rules lost their defer")
	}
}

// TestStagingANewDomain: a domain staged before it has live rules is
// known (its requests are answered, limited by nothing) and its staged
// rules are decided beside them.
func TestStagingANewDomain(t *testing.T) {
	live := config.NewStore(plansRules(t, "domain: other\ndescriptors: []\n"))
	src := NewSources(live, nil)
	body := "domain: nw\ndescriptors:\n  - key: u\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	if err := src.Apply(rulestore.Version{Domain: "nw", Version: 1, Body: body, Stage: rulestore.StageShadow}); err != nil {
		t.Fatal(err)
	}
	rs := live.Load()
	if _, known := rs.Lookup("nw"); !known {
		t.Fatal("nw unknown: its requests would be refused, and nothing decided under the staged rules")
	}
	if rs.Match("nw", []config.Entry{{Key: "u", Value: "x"}}) != nil || rs.Match("nw#staged", []config.Entry{{Key: "u", Value: "x"}}) == nil {
		t.Fatal("the live domain limits, or the staged one does not")
	}
}
