package failure

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/rulestore"
)

// plansRules: a client of domain saas without a plan is refused (limit
// 0); each plan has its own hourly limit.
const plansRules = `domain: saas
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 0}
    plans: {table: customers, limits: {free: 10, pro: 1000, ent: 100000}}
`

// checkSaas is one decision for api_key k on p.
func checkSaas(t *testing.T, p *proc, k string) string {
	t.Helper()
	_, body := call(t, p, "POST", "/v1/check", `{"domain":"saas","descriptors":[{"entries":[{"key":"api_key","value":"`+k+`"}]}]}`)
	switch {
	case strings.Contains(body, `"decision":"allow"`):
		return "allow"
	case strings.Contains(body, `"decision":"deny"`):
		return "deny"
	}
	t.Fatalf("check on %s: %s", p.name, body)
	return ""
}

// TestTenMillionClientPlans: ten million clients' plans in the rules
// store are loaded by three real checkers (the memory each takes
// measured), each client decided at its plan's limit; one write giving
// three new clients a plan is enforced by every checker within a second,
// with no rule compiled.
func TestTenMillionClientPlans(t *testing.T) {
	const n = 10_000_000
	rulesRedis := testsvc.StartPrivateRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: rulesRedis.Addr})
	defer rc.Close()
	store, err := rulestore.NewRedis(rc, "vr", rulestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plans := []string{"free", "pro", "ent"}
	start := time.Now()
	batch := make([]rulestore.ClientChange, 0, rulestore.MaxClientChanges)
	for i := 0; i < n; i++ {
		batch = append(batch, rulestore.ClientChange{Client: []string{"key-" + strconv.Itoa(i)}, Plan: plans[i%3]})
		if len(batch) == cap(batch) {
			if _, err := store.SetClients(ctx, "saas", "customers", batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	t.Logf("%d clients written to the rules store in %v", n, time.Since(start).Round(time.Millisecond))

	r := newRig(t, rigOptions{checkers: 3, extraConfig: fmt.Sprintf(
		"admin: {token: tok}\nrules_store: {backend: redis, redis_addrs: [%q], poll: 1s, max_age: 10m}\n", rulesRedis.Addr)})
	rss := make([]float64, len(r.checkers))
	for i, c := range r.checkers {
		rss[i] = c.metric("velvetrope_process_resident_bytes")
	}
	wrote := time.Now()
	if code, body := call(t, r.checkers[0], "PUT", "/v1/rules/saas?message=plans", plansRules); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	series := `velvetrope_client_plans_clients{table="saas/customers"}`
	for i, c := range r.checkers {
		for c.metric(series) != n {
			if time.Since(wrote) > 5*time.Minute {
				t.Fatalf("%s holds %v clients 5 min after the rules named the table\n%s", c.name, c.metric(series), c.tail())
			}
			time.Sleep(100 * time.Millisecond) // waiting for real processes
		}
		bytes := c.metric(`velvetrope_client_plans_bytes{table="saas/customers"}`)
		grew := c.metric("velvetrope_process_resident_bytes") - rss[i]
		t.Logf("%s: %d clients loaded %v after the rules were written; the table takes %.1f bytes a client, the process grew %.1f bytes a client",
			c.name, n, time.Since(wrote).Round(time.Millisecond), bytes/n, grew/n)
		if bytes/n > 64 {
			t.Errorf("%s: %.1f bytes a client; the bound is 64", c.name, bytes/n)
		}
		c.waitReady(t, time.Minute)
	}
	// each checker decides loaded clients at their plans' limits
	for i, c := range r.checkers {
		free, pro := "key-"+strconv.Itoa(3*(1000+i)), "key-"+strconv.Itoa(3*(2000+i)+1)
		got := ""
		for range 11 {
			got += checkSaas(t, c, free)[:1]
		}
		if got != "aaaaaaaaaad" {
			t.Fatalf("%s: a free client (10 an hour): %s", c.name, got)
		}
		if checkSaas(t, c, pro) != "allow" || checkSaas(t, c, "nobody") != "deny" {
			t.Fatalf("%s: a pro client refused, or a client without a plan admitted", c.name)
		}
	}

	// one write gives three new clients a plan: each checker, asked about
	// its own, admits it within a second
	wrote = time.Now()
	if code, body := call(t, r.checkers[1], "POST", "/v1/rules/saas/clients/customers",
		`{"changes":[{"client":["new-0"],"plan":"pro"},{"client":["new-1"],"plan":"pro"},{"client":["new-2"],"plan":"pro"}]}`); code != 200 {
		t.Fatalf("set: %d %s", code, body)
	}
	var slowest time.Duration
	for i, c := range r.checkers {
		for checkSaas(t, c, "new-"+strconv.Itoa(i)) != "allow" {
			if time.Since(wrote) > 30*time.Second {
				t.Fatalf("%s still refuses new-%d 30 s after its plan was written", c.name, i)
			}
			time.Sleep(2 * time.Millisecond) // waiting for real processes
		}
		slowest = max(slowest, time.Since(wrote))
	}
	t.Logf("a client's new plan enforced by all three checkers %v after the write", slowest.Round(time.Microsecond))
	if slowest > time.Second {
		t.Errorf("a client's plan took %v to reach every checker; the promise is 1 s", slowest)
	}
	for _, c := range r.checkers {
		if v := c.metric(`velvetrope_client_plans_scans_total{table="saas/customers"}`); v != 1 {
			t.Errorf("%s scanned the table %v times; one scan, then the log", c.name, v)
		}
	}
}
