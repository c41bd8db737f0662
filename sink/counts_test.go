package sink

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// countRows are a minute of every kind of row: a key of a hard rule,
// the same key in a second minute and from a second stream, a shadow
// rule's key, a soft rule's, an elastic rule's, and the pool it borrows
// from — whose domain holds every byte a rule id escapes.
func countRows() []Row {
	m0, m1 := t0.Unix(), t0.Add(time.Minute).Unix()
	const dom = `we:ird/d=o|m\x`
	pool := config.InternalRuleID(dom, "#pool", "p:1")
	return []Row{
		{Minute: m0, Domain: "api", Rule: "api:user", Descriptor: "user=a", Instance: "c/1", Stream: 1, Version: 1,
			Allowed: 5, Denied: 7, Deferred: 2, AllowedCost: 5, DeniedCost: 7, Late: 2, LateCost: 30},
		{Minute: m1, Domain: "api", Rule: "api:user", Descriptor: "user=a", Instance: "c/1", Stream: 1, Version: 2,
			Allowed: 1, Denied: 3, AllowedCost: 1, DeniedCost: 3},
		{Minute: m1, Domain: "api", Rule: "api:user", Descriptor: "user=a", Instance: "c/2", Stream: 9, Version: 3,
			Allowed: 2, Denied: 1, AllowedCost: 2, DeniedCost: 1},
		{Minute: m0, Domain: "api", Rule: "api:tenant", Descriptor: "tenant=t", Instance: "c/1", Stream: 2, Version: 4,
			Allowed: 2, ShadowDenied: 3, AllowedCost: 2, DeniedCost: 3},
		{Minute: m0, Domain: "api", Rule: "api:soft", Descriptor: "soft=s", Instance: "c/1", Stream: 3, Version: 5,
			Allowed: 6, OverSoft: 2, Denied: 1, AllowedCost: 6, DeniedCost: 1},
		{Minute: m0, Domain: dom, Rule: dom + ":team", Descriptor: "team=x", Instance: "c/1", Stream: 4, Version: 6,
			Allowed: 8, Elastic: 3, Denied: 4, AllowedCost: 8},
		{Minute: m0, Domain: dom, Rule: pool, Descriptor: "#pool=p:1", Instance: "c/1", Stream: 5, Version: 7,
			Allowed: 3, AllowedCost: 3, Denied: 4, DeniedCost: 4, Pool: true},
		{Minute: m1, Domain: dom, Rule: pool, Descriptor: "#pool=p:1", Instance: "c/2", Stream: 6, Version: 8,
			Allowed: 1, AllowedCost: 2, Pool: true},
	}
}

// TestEveryCountInEveryQuery (issue 20): each count a row holds —
// allowed, denied, deferred, shadow-denied, over-soft, elastic, late — comes
// back apart from every query of both stores, and pools' rows only from
// Pools: never as a key of top-denied or usage, a rule, or requests of
// the timeline (a borrowing request counts under its rule already; the
// dashboard listed `#pool=p` among the top denied keys).
func TestEveryCountInEveryQuery(t *testing.T) {
	ctx := context.Background()
	since := t0.Add(-time.Hour)
	const dom = `we:ird/d=o|m\x`
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			if err := s.Insert(ctx, countRows()); err != nil {
				t.Fatal(err)
			}
			checkCountQueries(t, s, since, dom)
		})
	}
}

func checkCountQueries(t *testing.T, s Analytics, since time.Time, dom string) {
	t.Helper()
	ctx := context.Background()
	top, err := s.TopDenied(ctx, TopQuery{Since: since, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	wantTop := []KeyUsage{
		{Domain: "api", Rule: "api:user", Descriptor: "user=a", Allowed: 8, Denied: 11, Deferred: 2, Late: 2},
		{Domain: dom, Rule: dom + ":team", Descriptor: "team=x", Allowed: 8, Denied: 4, Elastic: 3},
		{Domain: "api", Rule: "api:soft", Descriptor: "soft=s", Allowed: 6, Denied: 1, OverSoft: 2},
	}
	if !slices.Equal(top, wantTop) {
		t.Errorf("top denied (no pool, no key nobody refused):\n got %+v\nwant %+v", top, wantTop)
	}
	for _, q := range []UsageQuery{{Domain: dom, Descriptor: "#pool=p:1"}, {Domain: "api", Descriptor: "tenant=t"}} {
		q.Since = since
		got, err := s.Usage(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var want []MinuteUsage
		if q.Domain == "api" {
			want = []MinuteUsage{{Minute: t0, Allowed: 2, ShadowDenied: 3, AllowedCost: 2, DeniedCost: 3}}
		}
		if len(got) != len(want) || len(want) > 0 && got[0] != want[0] {
			t.Errorf("usage of %s: got %+v, want %+v", q.Descriptor, got, want)
		}
	}
	tl, err := s.Timeline(ctx, TimelineQuery{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	wantTL := []MinuteUsage{
		{Minute: t0, Allowed: 21, Denied: 12, Deferred: 2, ShadowDenied: 3, OverSoft: 2, Elastic: 3, AllowedCost: 21, DeniedCost: 11, Late: 2, LateCost: 30},
		{Minute: t0.Add(time.Minute), Allowed: 3, Denied: 4, AllowedCost: 3, DeniedCost: 4},
	}
	if !slices.Equal(tl, wantTL) {
		t.Errorf("timeline (pools left out):\n got %+v\nwant %+v", tl, wantTL)
	}
	rules, err := s.Rules(ctx, RulesQuery{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	wantRules := []RuleUsage{
		{Domain: "api", Rule: "api:soft", Allowed: 6, Denied: 1, OverSoft: 2, DenyRate: 1.0 / 7},
		{Domain: "api", Rule: "api:tenant", Allowed: 2, ShadowDenied: 3},
		{Domain: "api", Rule: "api:user", Allowed: 8, Denied: 11, Deferred: 2, Late: 2, DenyRate: 11.0 / 21},
		{Domain: dom, Rule: dom + ":team", Allowed: 8, Denied: 4, Elastic: 3, DenyRate: 4.0 / 12},
	}
	if !slices.Equal(rules, wantRules) {
		t.Errorf("rules (pools left out; shadow-denied decisions in the deny rate's whole):\n got %+v\nwant %+v", rules, wantRules)
	}
	pools, err := s.Pools(ctx, PoolsQuery{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	wantPools := []PoolUsage{{Domain: dom, Pool: "p:1", Rule: config.InternalRuleID(dom, "#pool", "p:1"), Borrowed: 4, BorrowedHits: 5, Refused: 4}}
	if !slices.Equal(pools, wantPools) {
		t.Errorf("pools:\n got %+v\nwant %+v", pools, wantPools)
	}
	if other, err := s.Pools(ctx, PoolsQuery{Since: since, Domain: "api"}); err != nil || len(other) != 0 {
		t.Errorf("pools of domain api: %+v, %v; want none", other, err)
	}
}

// TestMigrationFromV1 (issue 20): a table created by the first schema —
// rows without over_soft, elastic and pool, pools' rows among them — is
// migrated in place (columns added, 18.16 and current servers alike): its
// old rows read over_soft and elastic 0 and tell pools from keys as
// config.PoolOf does, whatever the domain escapes; new rows carry every
// count. Migrating again, or from two processes at once, is a no-op.
func TestMigrationFromV1(t *testing.T) {
	ctx := context.Background()
	old := newCH(t, testsvc.ClickHouse(t), nil)
	// the first schema, as a release that had only migration 1 made it
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS " + old.db,
		"CREATE TABLE IF NOT EXISTS " + old.db + ".schema_migrations (version UInt32, name String, applied_at DateTime) " +
			"ENGINE = ReplacingMergeTree() ORDER BY version",
		fmt.Sprintf(migrations[0].stmts[0], old.db),
	} {
		if err := old.conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.record(ctx, migrations[0]); err != nil {
		t.Fatal(err)
	}
	// the ids a pool test must get right: every escaped byte in the
	// domain, a rule file's rule keyed like a pool's entry, a domain
	// ending in what a pool id holds
	domains := []string{"api", `a\b`, "a:#pool", `x/y=z|w:`, "#pool", `\`}
	type probe struct {
		domain, rule string
		pool         bool
	}
	var probes []probe
	for _, d := range domains {
		for _, r := range []*config.Rule{{ID: config.InternalRuleID(d, "#pool", "p")}, {ID: config.InternalRuleID(d, "control", "deny")}} {
			_, isPool := config.PoolOf(r.ID)
			probes = append(probes, probe{d, r.ID, isPool})
		}
		id := string(config.AppendEscaped(nil, d)) + ":" + string(config.AppendEscaped(nil, "#pool")) + "=p"
		probes = append(probes, probe{d, id, false})
	}
	b, err := old.conn.PrepareBatch(ctx, "INSERT INTO "+old.db+".usage_minute (minute, domain, rule, descriptor, instance, stream, "+
		"version, allowed, denied, deferred, shadow_denied, allowed_cost, denied_cost)")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range probes {
		if err := b.Append(t0.Add(-2*time.Hour), p.domain, p.rule, "k=v", "c/1", uint64(i+1), uint64(1), uint64(1), uint64(0), uint64(0), uint64(0), uint64(1), uint64(0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}

	// two processes migrate at once, a third later
	procs := []*ClickHouse{old, sameDB(t, old), sameDB(t, old)}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { errs[i] = procs[i].Migrate(ctx) })
	}
	wg.Wait()
	if err := procs[2].Migrate(ctx); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("migrating: %v, %v, then %v", errs[0], errs[1], err)
	}
	for _, p := range probes {
		var pool uint8
		var overSoft, elastic uint64
		if err := old.conn.QueryRow(ctx, "SELECT pool, over_soft, elastic FROM "+old.db+".usage_minute FINAL WHERE domain = ? AND rule = ?",
			p.domain, p.rule).Scan(&pool, &overSoft, &elastic); err != nil {
			t.Fatal(err)
		}
		if (pool == 1) != p.pool || overSoft != 0 || elastic != 0 {
			t.Errorf("old row of domain %q, rule %q: pool %d over_soft %d elastic %d; config.PoolOf says pool %v",
				p.domain, p.rule, pool, overSoft, elastic, p.pool)
		}
	}
	var n uint64
	if err := old.conn.QueryRow(ctx, "SELECT count() FROM "+old.db+".schema_migrations FINAL").Scan(&n); err != nil || int(n) != len(migrations) {
		t.Fatalf("%d migrations recorded (%v), want %d", n, err, len(migrations))
	}
	// the migrated table takes and answers every count (the old rows
	// are older than the window)
	if err := procs[2].Insert(ctx, countRows()); err != nil {
		t.Fatal(err)
	}
	checkCountQueries(t, procs[2], t0.Add(-time.Hour), `we:ird/d=o|m\x`)
}

// sameDB is another process's store over c's database.
func sameDB(t *testing.T, c *ClickHouse) *ClickHouse {
	t.Helper()
	o, err := NewClickHouse(ClickHouseConfig{Addr: c.cfg.Addr, Database: c.cfg.Database})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}
