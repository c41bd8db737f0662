package counters

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// leaseStores are the in-memory store and the real Redis servers, each
// on a clock the test moves.
func leaseStores(t *testing.T, now *int64) map[string]interface {
	SyncStore
	Leases
	Resetter
} {
	out := map[string]interface {
		SyncStore
		Leases
		Resetter
	}{}
	ms := NewMemStore()
	ms.SetClock(clockFunc(func() int64 { return *now }))
	out["memory"] = ms
	if getenv(testsvc.EnvRedis) != "" || getenv(testsvc.EnvRedisCluster) != "" {
		for name, c := range redisTargets(t, "%s") {
			r := NewRedis(c, testsvc.Unique("lease"), 0)
			r.PinClock(func() int64 { return *now })
			out[name] = r
		}
	}
	return out
}

type clockFunc func() int64

func (f clockFunc) Now() int64 { return f() }

// TestLeases: at most Limit leases in flight per counter; a refused
// acquire says when to retry; a release frees a place at once (by id,
// or the oldest for Envoy's is_negative_hits); a lease nobody releases
// expires after its TTL; the rule's count is the sum of its counters'; a
// retried acquire (request id) holds one lease; a refund (a request
// refused by another descriptor) releases its lease; a reset drops every
// lease of the counter. The same on memory, Redis and Redis Cluster.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	now := w0
	for name, st := range leaseStores(t, &now) {
		t.Run(name, func(t *testing.T) {
			now = w0
			rule := testsvc.Unique("api:tenant")
			q := func(tenant string, lease int) *SyncRequest {
				return &SyncRequest{Key: rule + "|tenant=" + tenant, Algorithm: config.AlgConcurrency, Limit: 2,
					Window: int64(10 * time.Second), Cost: 1, Rule: rule, Lease: fmt.Sprintf("lease-%d", lease), Now: now}
			}
			acquire := func(tenant string, lease int) SyncResult {
				t.Helper()
				res, err := st.ChargeSync(ctx, q(tenant, lease))
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			inFlight := func() int64 {
				t.Helper()
				m, err := st.InFlight(ctx, []string{rule})
				if err != nil {
					t.Fatal(err)
				}
				return m[rule]
			}
			a, b := acquire("acme", 1), acquire("acme", 2)
			if !a.Allowed || a.Token != "lease-1" || a.Remaining != 1 || !b.Allowed || b.Remaining != 0 {
				t.Fatalf("two leases of 2: %+v %+v", a, b)
			}
			c := acquire("acme", 3)
			if c.Allowed || c.Token != "" || c.RetryAfter < time.Millisecond || c.RetryAfter > time.Second {
				t.Fatalf("a third lease of 2: %+v", c)
			}
			if o := acquire("other", 4); !o.Allowed {
				t.Fatalf("another tenant's lease: %+v", o)
			}
			if n := inFlight(); n != 3 {
				t.Fatalf("rule in flight %d, want 3", n)
			}
			if ok, err := st.ReleaseLease(ctx, q("acme", 0), "lease-1"); !ok || err != nil {
				t.Fatalf("release lease-1: %v %v", ok, err)
			}
			if ok, _ := st.ReleaseLease(ctx, q("acme", 0), "lease-1"); ok {
				t.Fatal("lease-1 released twice")
			}
			if ok, _ := st.ReleaseLease(ctx, q("other", 0), "lease-2"); ok {
				t.Fatal("another counter's lease released")
			}
			if d := acquire("acme", 5); !d.Allowed {
				t.Fatalf("after a release: %+v", d)
			}
			now += int64(3 * time.Second)
			if ok, _ := st.ReleaseLease(ctx, q("acme", 0), ""); !ok { // the oldest: lease-2
				t.Fatal("release of the oldest")
			}
			if ok, _ := st.ReleaseLease(ctx, q("acme", 0), "lease-2"); ok {
				t.Fatal("the oldest was not lease-2")
			}
			// a retried acquire holds one lease
			retry := q("acme", 6)
			retry.RequestID, retry.IdempotencyTTL = "req-6", time.Minute
			r1, _ := st.ChargeSync(ctx, retry)
			r2, _ := st.ChargeSync(ctx, retry)
			if !r1.Allowed || r1 != r2 {
				t.Fatalf("retried acquire: %+v then %+v", r1, r2)
			}
			if n := inFlight(); n != 3 { // lease-5, lease-6, other's lease-4
				t.Fatalf("in flight %d, want 3", n)
			}
			// a refund releases the refused request's lease
			if err := st.RefundSync(ctx, q("acme", 0), "lease-6"); err != nil {
				t.Fatal(err)
			}
			if n := inFlight(); n != 2 {
				t.Fatalf("after the refund: in flight %d, want 2", n)
			}
			// leases nobody releases expire after their TTL (10 s)
			now += int64(6500 * time.Millisecond) // +9.5 s: lease-4 and lease-5, taken at +0, still held
			if n := inFlight(); n != 2 {
				t.Fatalf("in flight at +9.5s: %d, want 2", n)
			}
			if g := acquire("acme", 10); g.Allowed { // acme holds lease-5 and... only one: room for one
				_, _ = st.ReleaseLease(ctx, q("acme", 0), "lease-10")
			} else {
				t.Fatalf("acme holds one lease of 2 and was refused: %+v", g)
			}
			now += int64(600 * time.Millisecond) // +10.1 s: both expired
			if n := inFlight(); n != 0 {
				t.Fatalf("in flight at +10.1s: %d, want 0", n)
			}
			now += int64(10 * time.Second)
			if n := inFlight(); n != 0 {
				t.Fatalf("in flight after every TTL: %d", n)
			}
			if e, f := acquire("acme", 7), acquire("acme", 8); !e.Allowed || !f.Allowed {
				t.Fatalf("after expiry: %+v %+v", e, f)
			}
			if err := st.ResetSync(ctx, q("acme", 0)); err != nil {
				t.Fatal(err)
			}
			if n := inFlight(); n != 0 {
				t.Fatalf("after a reset: %d", n)
			}
			if p := acquire("acme", 9); !p.Allowed || p.Remaining != 1 {
				t.Fatalf("after a reset: %+v", p)
			}
			probe := q("acme", 0)
			probe.Cost, probe.Lease = 0, ""
			if res, err := st.ChargeSync(ctx, probe); err != nil || !res.Allowed || res.Token != "" || res.Remaining != 1 {
				t.Fatalf("a probe: %+v %v", res, err)
			}
		})
	}
}
