package checker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/ratelimit"
)

const leaseRules = `domain: api
descriptors:
  - key: tenant
    concurrency: {max_in_flight: 2, lease_ttl: 10s}
  - key: user
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestConcurrencyLeases: a tenant holds at most 2 requests in flight,
// across two checkers sharing the store; each admission's status carries
// its lease; a release (by id on either checker, or Envoy's
// is_negative_hits) frees a place at once; a request another rule refuses
// holds no lease; a lease nobody releases expires with its TTL; a
// request id's retry acquires anew; hits do not multiply leases, nor
// does a repeated descriptor multiply what a release gives back.
func TestConcurrencyLeases(t *testing.T) {
	ctx := context.Background()
	rg := newRigRules(t, Config{InstanceName: "a", IdempotencyTTL: time.Minute}, leaseRules)
	b, err := New(Config{InstanceName: "b"}, ruleStore(t, leaseRules), rg.store, rg.prod, rg.clk)
	if err != nil {
		t.Fatal(err)
	}
	check := func(c *Checker, r *ratelimit.Request) ratelimit.Decision {
		t.Helper()
		var d ratelimit.Decision
		if err := c.Check(ctx, r, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := check(rg.c, req(5, "tenant", "acme")) // hits 5: still one lease
	if first.Code != ratelimit.OK || first.Statuses[0].Lease == "" || first.Statuses[0].Remaining != 1 || first.Statuses[0].Limit != 2 {
		t.Fatalf("first: %s %+v", codes(first), first.Statuses[0])
	}
	second := check(b, req(1, "tenant", "acme"))
	if second.Code != ratelimit.OK || second.Statuses[0].Lease == "" || second.Statuses[0].Lease == first.Statuses[0].Lease {
		t.Fatalf("second (on b): %s %+v", codes(second), second.Statuses[0])
	}
	rg.clk.ns.Add(int64(time.Millisecond)) // later leases expire later: second's is the oldest
	third := check(rg.c, req(1, "tenant", "acme"))
	if third.Code != ratelimit.OverLimit || third.Statuses[0].Lease != "" || third.Statuses[0].RetryAfter <= 0 {
		t.Fatalf("third of 2 in flight: %s %+v", codes(third), third.Statuses[0])
	}
	if d := check(rg.c, req(1, "tenant", "other")); d.Code != ratelimit.OK {
		t.Fatalf("another tenant: %s", codes(d))
	}
	// b releases a's lease by its id
	if ok, err := b.ReleaseLease(ctx, first.Statuses[0].Lease); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if ok, _ := rg.c.ReleaseLease(ctx, first.Statuses[0].Lease); ok {
		t.Fatal("released twice")
	}
	fourth := check(rg.c, req(1, "tenant", "acme"))
	if fourth.Code != ratelimit.OK {
		t.Fatalf("after a release: %s", codes(fourth))
	}
	// a request the user rule refuses holds no lease
	check(rg.c, req(1, "user", "u"))
	if ok, _ := rg.c.ReleaseLease(ctx, fourth.Statuses[0].Lease); !ok {
		t.Fatal("release of the fourth")
	}
	refused := check(rg.c, req(1, "tenant", "acme", "user", "u"))
	if refused.Code != ratelimit.OverLimit || refused.Statuses[0].Lease != "" {
		t.Fatalf("refused by user: %s %+v", codes(refused), refused.Statuses)
	}
	if d := check(rg.c, req(1, "tenant", "acme")); d.Code != ratelimit.OK {
		t.Fatalf("the refused request kept its lease: %s", codes(d))
	}
	// acme now holds second's and this one: Envoy's is_negative_hits frees
	// the oldest, one for a descriptor named twice (an acquire took one)
	rel := req(1, "tenant", "acme", "tenant", "acme")
	rel.ReleaseLeases = true
	if d := check(b, rel); d.Code != ratelimit.OK {
		t.Fatalf("release by descriptors: %s", codes(d))
	}
	if ok, _ := b.ReleaseLease(ctx, second.Statuses[0].Lease); ok {
		t.Fatal("is_negative_hits did not release the oldest lease (second's)")
	}
	// a request id's retry is no replay under a concurrency rule: a lease
	// may be gone by then (expired, released), so the retry acquires anew
	// (here: refused, the first holds the place; it expires with its TTL)
	withID := req(1, "tenant", "acme")
	withID.RequestID = "r-1"
	r1, r2 := check(rg.c, withID), check(rg.c, withID)
	if r1.Code != ratelimit.OK || r1.Statuses[0].Lease == "" || r2.Code != ratelimit.OverLimit || r2.Statuses[0].Lease != "" {
		t.Fatalf("retry: %+v then %+v", r1.Statuses[0], r2.Statuses[0])
	}
	if d := check(b, req(1, "tenant", "acme")); d.Code != ratelimit.OverLimit {
		t.Fatalf("2 in flight (one retried): %s", codes(d))
	}
	// nobody releases: the leases expire with their TTL
	rg.clk.ns.Add(int64(11 * time.Second))
	for range 2 {
		if d := check(b, req(1, "tenant", "acme")); d.Code != ratelimit.OK {
			t.Fatalf("after the TTL: %s", codes(d))
		}
	}
	n, err := b.InFlight(ctx)
	if err != nil || n["api:tenant"] != 2 {
		t.Fatalf("in flight %v %v, want api:tenant 2", n, err)
	}
	var fe *ratelimit.FieldError
	for _, bad := range []string{"", "x", "YWJj.short", "!!.AAAAAAAAAAAAAAAAAAAAAA"} {
		if _, err := rg.c.ReleaseLease(ctx, bad); !errors.As(err, &fe) || fe.Field != "lease" {
			t.Errorf("lease %q: %v, want a lease field error", bad, err)
		}
	}
}

// TestConcurrencyChargeAndStore: a late charge takes no lease; with the
// store down the rule's failure policy decides (open by default: admitted
// without a lease).
func TestConcurrencyChargeAndStore(t *testing.T) {
	ctx := context.Background()
	rg := newRigRules(t, Config{InstanceName: "a"}, leaseRules)
	var d ratelimit.Decision
	if err := rg.c.Check(ctx, charge(3, "", "tenant", "acme"), &d); err != nil || d.Statuses[0].Lease != "" {
		t.Fatalf("a charge: %+v %v", d.Statuses, err)
	}
	if n, _ := rg.c.InFlight(ctx); n["api:tenant"] != 0 {
		t.Fatalf("a charge holds a lease: %v", n)
	}
	rg.store.SetUnavailable(true)
	d = rg.check(t, 1, "tenant", "acme")
	if d.Code != ratelimit.OK || !d.Statuses[0].Degraded || d.Statuses[0].Lease != "" {
		t.Fatalf("store down, failure open: %s %+v", codes(d), d.Statuses[0])
	}
}

// BenchmarkLeaseAcquireRelease is one request under a concurrency rule on
// the in-memory store: its lease taken, then given back by id (the store
// call each makes is the cost; the Redis scripts' is in the counters
// package's tests).
func BenchmarkLeaseAcquireRelease(b *testing.B) {
	rg := newRigRules(b, Config{InstanceName: "a"}, leaseRules)
	r := req(1, "tenant", "acme")
	var d ratelimit.Decision
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := rg.c.Check(ctx, r, &d); err != nil || d.Statuses[0].Lease == "" {
			b.Fatalf("%v %v", d.Code, err)
		}
		if ok, err := rg.c.ReleaseLease(ctx, d.Statuses[0].Lease); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
