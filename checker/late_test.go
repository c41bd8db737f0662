package checker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/ratelimit"
)

// lateCases are every algorithm and mode a late charge meets.
var lateCases = []struct{ name, ext string }{
	{"envoy", ""},
	{"fixed_window", "algorithm: fixed_window"},
	{"sliding_window", "algorithm: sliding_window"},
	{"token_bucket", "algorithm: token_bucket"},
	{"gcra", "algorithm: gcra"},
	{"leaky_bucket", "algorithm: leaky_bucket"},
	{"near_limit async", "algorithm: fixed_window\n    near_limit: async"},
	{"shards", "algorithm: fixed_window\n    shards: 4"},
	{"sliding_log sync", "algorithm: sliding_log\n    mode: sync"},
	{"fixed_window sync", "algorithm: fixed_window\n    mode: sync"},
	{"gcra sync", "algorithm: gcra\n    mode: sync"},
	{"fixed_window local", "algorithm: fixed_window\n    mode: local"},
	{"token_bucket local", "algorithm: token_bucket\n    mode: local"},
	{"elastic", "algorithm: fixed_window\n    throttle: {type: elastic, pool: spare, max_multiplier: 2}"},
	{"soft", "algorithm: fixed_window\n    throttle: {type: soft, overage_percent: 50}"},
}

func lateRules(ext string) string {
	pool := ""
	if strings.Contains(ext, "elastic") {
		pool = "pools:\n  - {name: spare, rate_limit: {unit: minute, requests_per_unit: 5}}\n"
	}
	return fmt.Sprintf("domain: api\n%sdescriptors:\n  - key: k\n    %s\n    rate_limit: {unit: minute, requests_per_unit: 10}\n", pool, ext)
}

func charge(hits int64, id string, kv ...string) *ratelimit.Request {
	r := req(hits, kv...)
	r.Charge, r.RequestID = true, id
	return r
}

// TestLateChargeEveryAlgorithmAndMode: a cost charged after the response
// is never refused, takes the key past its limit (the charge's status
// says nothing remains, the next request is refused, on this checker and
// on another sharing the store), reaches the analytics as a late charge
// and, with a request id, is counted once.
func TestLateChargeEveryAlgorithmAndMode(t *testing.T) {
	ctx := context.Background()
	for _, c := range lateCases {
		t.Run(c.name, func(t *testing.T) {
			rg := newRigRules(t, Config{InstanceName: "a", IdempotencyTTL: time.Minute}, lateRules(c.ext))
			if d := rg.check(t, 1, "k", "v"); d.Code != ratelimit.OK {
				t.Fatalf("first request: %s", codes(d))
			}
			for range 2 { // a retry of the charge is answered the same, counted once
				var d ratelimit.Decision
				if err := rg.c.Check(ctx, charge(25, "resp-1", "k", "v"), &d); err != nil {
					t.Fatal(err)
				}
				if d.Code != ratelimit.OK || d.Statuses[0].Code != ratelimit.OK || d.Statuses[0].Remaining != 0 {
					t.Fatalf("charge answered %s remaining %d; want allow with nothing remaining", codes(d), d.Statuses[0].Remaining)
				}
				if st := d.Statuses[0]; st.OverSoft || st.Elastic {
					t.Fatalf("a charge is no admission: %+v", st)
				}
			}
			if d := rg.check(t, 1, "k", "v"); d.Code != ratelimit.OverLimit {
				t.Fatalf("the request after a charge past the limit: %s, want deny", codes(d))
			}
			if err := rg.c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var late, lateCost uint64
			for _, d := range rg.prod.all {
				late, lateCost = late+d.LateCount, lateCost+d.LateCost
				if m := d.GetMinute(); m != nil && m.LateCost > 25 {
					t.Fatalf("minute row late cost %d", m.LateCost)
				}
			}
			if late != 1 || lateCost != 25 {
				t.Fatalf("deltas carry %d late charges of %d hits, want 1 of 25", late, lateCost)
			}
			if strings.Contains(c.ext, "local") {
				return // a local counter is this process's only
			}
			other, err := New(Config{InstanceName: "b"}, ruleStore(t, lateRules(c.ext)), rg.store, rg.prod, rg.clk)
			if err != nil {
				t.Fatal(err)
			}
			// a probe first: an async counter learns the store's count at
			// its next refresh (near_limit: async and shards by design;
			// the others at their first store call)
			var d ratelimit.Decision
			if err := other.Check(ctx, req(0, "k", "v"), &d); err != nil {
				t.Fatal(err)
			}
			rg.clk.ns.Add(int64(5 * time.Second))
			other.Refresh(ctx)
			if err := other.Check(ctx, req(1, "k", "v"), &d); err != nil {
				t.Fatal(err)
			}
			if d.Code != ratelimit.OverLimit {
				t.Fatalf("another checker admitted after the charge: %s", codes(d))
			}
		})
	}
}

// TestLateChargeUnderTheLimit: a charge within the limit leaves the rest,
// and a charge of nothing counts nothing.
func TestLateChargeUnderTheLimit(t *testing.T) {
	for _, c := range lateCases {
		t.Run(c.name, func(t *testing.T) {
			rg := newRigRules(t, Config{InstanceName: "a"}, lateRules(c.ext))
			for _, step := range []struct{ hits, remaining int64 }{{4, 6}, {0, 6}, {5, 1}} {
				var d ratelimit.Decision
				if err := rg.c.Check(context.Background(), charge(step.hits, "", "k", "v"), &d); err != nil {
					t.Fatal(err)
				}
				if d.Code != ratelimit.OK || d.Statuses[0].Remaining != step.remaining {
					t.Fatalf("charge of %d: %s remaining %d, want %d", step.hits, codes(d), d.Statuses[0].Remaining, step.remaining)
				}
			}
			if d := rg.check(t, 1, "k", "v"); d.Code != ratelimit.OK {
				t.Fatalf("the last hit refused: %s", codes(d))
			}
			// past the limit: refused, borrowed from the pool (elastic) or within the overage (soft)
			if d := rg.check(t, 1, "k", "v"); d.Code != ratelimit.OverLimit && !d.Statuses[0].Elastic && !d.Statuses[0].OverSoft {
				t.Fatalf("past the limit: %s", codes(d))
			}
		})
	}
}

// TestLateChargeByRequestID: a charge naming its check's request id and
// no descriptors charges the check's descriptors; an id this checker
// never decided is refused naming request_id.
func TestLateChargeByRequestID(t *testing.T) {
	ctx := context.Background()
	rg := newRigRules(t, Config{InstanceName: "a", IdempotencyTTL: time.Minute}, lateRules("algorithm: fixed_window"))
	check := req(1, "k", "v")
	check.RequestID = "q-1"
	var d ratelimit.Decision
	if err := rg.c.Check(ctx, check, &d); err != nil || d.Code != ratelimit.OK {
		t.Fatalf("check: %s %v", codes(d), err)
	}
	byID := &ratelimit.Request{Domain: "api", Hits: 7, RequestID: "q-1", Charge: true}
	if err := rg.c.Check(ctx, byID, &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != ratelimit.OK || len(d.Statuses) != 1 || d.Statuses[0].Remaining != 2 {
		t.Fatalf("charge by id: %s %+v", codes(d), d.Statuses)
	}
	if len(byID.Descriptors) != 0 {
		t.Fatal("the caller's request was changed")
	}
	// the check's own id still answers the check (charges keep their ids apart)
	if err := rg.c.Check(ctx, check, &d); err != nil || d.Statuses[0].Remaining != 9 {
		t.Fatalf("the check's retry: %+v %v", d.Statuses, err)
	}
	unknown := &ratelimit.Request{Domain: "api", Hits: 7, RequestID: "never", Charge: true}
	err := rg.c.Check(ctx, unknown, &d)
	var fe *ratelimit.FieldError
	if !errors.As(err, &fe) || fe.Field != "request_id" {
		t.Fatalf("unknown id: %v, want a request_id field error", err)
	}
	noID := &ratelimit.Request{Domain: "api", Hits: 7, Charge: true}
	if err := rg.c.Check(ctx, noID, &d); !errors.As(err, &fe) || fe.Field != "descriptors" {
		t.Fatalf("no descriptors, no id: %v", err)
	}
}

// TestLateChargeStoreDown: a charge of a `mode: sync` rule the store
// cannot take counts nothing at all and says so; retried when the store
// is back, it is counted once.
func TestLateChargeStoreDown(t *testing.T) {
	ctx := context.Background()
	rg := newRigRules(t, Config{InstanceName: "a", IdempotencyTTL: time.Minute},
		"domain: api\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    mode: sync\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: m\n    algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	rg.store.SetUnavailable(true)
	var d ratelimit.Decision
	if err := rg.c.Check(ctx, charge(4, "c-1", "m", "x", "k", "v"), &d); err == nil {
		t.Fatal("a charge the store refused reported success")
	}
	rg.store.SetUnavailable(false)
	if err := rg.c.Check(ctx, charge(4, "c-1", "m", "x", "k", "v"), &d); err != nil {
		t.Fatal(err)
	}
	if d.Statuses[0].Remaining != 6 || d.Statuses[1].Remaining != 6 {
		t.Fatalf("after the retry: %+v, want 6 remaining on both (counted once)", d.Statuses)
	}
}

// TestLateChargeBucketDebtBounded: a bucket's debt is bounded at a
// hundred capacities whatever the charge (2^32 hits included) and
// whatever was decided before it: the next request's wait is at most 101
// capacities' refill on this checker and on another that reads the store
// (the probe found a key checked before the charge carried the whole
// charge to the store: 16.6 h, and 89 years for 2^32 hits).
func TestLateChargeBucketDebtBounded(t *testing.T) {
	ctx := context.Background()
	const maxWait = 101 * time.Minute / 10 * 10 // 101 capacities of 10 a minute: 101 minutes
	for _, alg := range []string{"token_bucket", "gcra", "leaky_bucket"} {
		for _, hits := range []int64{100000, 1 << 32} {
			t.Run(fmt.Sprintf("%s/%d", alg, hits), func(t *testing.T) {
				rules := lateRules("algorithm: " + alg)
				rg := newRigRules(t, Config{InstanceName: "a"}, rules)
				rg.check(t, 1, "k", "v")
				for range 2 {
					var d ratelimit.Decision
					if err := rg.c.Check(ctx, charge(hits, "", "k", "v"), &d); err != nil {
						t.Fatal(err)
					}
					if d.Statuses[0].ResetAfter > maxWait {
						t.Fatalf("the charge says reset in %v", d.Statuses[0].ResetAfter)
					}
				}
				d := rg.check(t, 1, "k", "v")
				if d.Code != ratelimit.OverLimit || d.Statuses[0].RetryAfter > maxWait {
					t.Fatalf("after the charge: %s retry %v (at most %v)", codes(d), d.Statuses[0].RetryAfter, maxWait)
				}
				if err := rg.c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				other, err := New(Config{InstanceName: "b"}, ruleStore(t, rules), rg.store, rg.prod, rg.clk)
				if err != nil {
					t.Fatal(err)
				}
				var od ratelimit.Decision
				if err := other.Check(ctx, req(1, "k", "v"), &od); err != nil {
					t.Fatal(err)
				}
				if od.Code != ratelimit.OverLimit || od.Statuses[0].RetryAfter > maxWait+time.Minute {
					t.Fatalf("another checker: %s retry %v", codes(od), od.Statuses[0].RetryAfter)
				}
				rg.clk.ns.Add(int64(maxWait + 2*time.Minute))
				if d := rg.check(t, 1, "k", "v"); d.Code != ratelimit.OK {
					t.Fatalf("after 103 minutes: %s", codes(d))
				}
			})
		}
	}
}

// TestConcurrentChargesOneID: 16 concurrent copies of one charge (one
// request id) are counted once, on every algorithm and mode.
func TestConcurrentChargesOneID(t *testing.T) {
	for _, c := range lateCases {
		t.Run(c.name, func(t *testing.T) {
			rg := newRigRules(t, Config{InstanceName: "a", IdempotencyTTL: time.Minute}, lateRules(c.ext))
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					var d ratelimit.Decision
					if err := rg.c.Check(context.Background(), charge(3, "once", "k", "v"), &d); err != nil {
						t.Error(err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if d := rg.check(t, 0, "k", "v"); d.Statuses[0].Remaining != 7 {
				t.Fatalf("remaining %d after 16 copies of one charge of 3, want 7", d.Statuses[0].Remaining)
			}
		})
	}
}

// TestBucketRetryCountsDown: a bucket's refusals say how long until the
// next token, counting down as time passes, and a request made then is
// admitted: with one limit, with several, and after a late charge. (The
// probe saw 3 s, then 5.7 s 300 ms later: the retry of a refusal from
// memory was the one-token trust window of the store's last answer.)
func TestBucketRetryCountsDown(t *testing.T) {
	cases := map[string]string{
		"one limit": "domain: api\ndescriptors:\n  - key: k\n    algorithm: token_bucket\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
		"several":   "domain: api\ndescriptors:\n  - key: k\n    algorithm: token_bucket\n    limits:\n      - {unit: second, requests_per_unit: 50}\n      - {unit: minute, requests_per_unit: 10}\n",
	}
	for name, rules := range cases {
		for _, charged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/charged=%v", name, charged), func(t *testing.T) {
				rg := newRigRules(t, Config{InstanceName: "a"}, rules)
				if charged {
					var d ratelimit.Decision
					if err := rg.c.Check(context.Background(), charge(12, "", "k", "v"), &d); err != nil {
						t.Fatal(err)
					}
				}
				var last time.Duration
				var lastAt int64
				refusals := 0
				for range 40 {
					d := rg.check(t, 1, "k", "v")
					now := rg.clk.ns.Load()
					if d.Code == ratelimit.OK {
						if refusals > 0 && now-lastAt < int64(last) {
							t.Fatalf("admitted %v after a refusal that said %v", time.Duration(now-lastAt), last)
						}
						last, refusals = 0, 0
					} else {
						retry := d.Statuses[0].RetryAfter
						if refusals > 0 {
							want := last - time.Duration(now-lastAt)
							if retry < want-time.Millisecond || retry > want+time.Millisecond {
								t.Fatalf("refusal %d says %v, the one %v before said %v", refusals, retry, time.Duration(now-lastAt), last)
							}
						}
						last, lastAt = retry, now
						refusals++
					}
					rg.clk.ns.Add(int64(300 * time.Millisecond))
				}
			})
		}
	}
}

// TestViewIsNoDecision: a quota server's look at a counter (Request.View)
// tells what remains and how the fleet spends it, and is no decision in
// the analytics, near the limit too (a store charge of nothing); a quota
// report's requests are decisions, not late charges.
func TestViewIsNoDecision(t *testing.T) {
	ctx := context.Background()
	for _, c := range lateCases {
		t.Run(c.name, func(t *testing.T) {
			rg := newRigRules(t, Config{InstanceName: "a"}, lateRules(c.ext))
			rep := charge(4, "", "k", "v")
			rep.Report, rep.Denied = true, 2
			var d ratelimit.Decision
			if err := rg.c.Check(ctx, rep, &d); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				var v ratelimit.QuotaView
				probe := req(0, "k", "v")
				probe.View = &v
				if err := rg.c.Check(ctx, probe, &d); err != nil {
					t.Fatal(err)
				}
				if bucket := strings.Contains(c.ext, "bucket") || strings.Contains(c.ext, "gcra"); v.Window == bucket {
					t.Fatalf("view %+v: a window is %v", v, !bucket)
				}
				if !v.Known || v.Remaining != 6 || v.Fleet != 1 {
					t.Fatalf("view %+v, want 6 remaining of a fleet of 1", v)
				}
			}
			if err := rg.c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var allowed, denied, late uint64
			for _, dl := range rg.prod.all {
				if m := dl.GetMinute(); m != nil {
					allowed, denied, late = max(allowed, m.AllowedCount), max(denied, m.DeniedCount), max(late, m.LateCount)
				}
			}
			if allowed != 4 || denied != 2 || late != 0 {
				t.Fatalf("analytics: %d allowed, %d denied, %d late; want the report's 4 and 2, and nothing of the looks", allowed, denied, late)
			}
		})
	}
}
