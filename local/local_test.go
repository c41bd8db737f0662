package local

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) Now() int64 { return c.ns.Load() }

// t0 is aligned to a day, so Envoy windows start at t0.
const t0 = int64(1_700_006_400) * 1e9

const rulesYAML = `domain: api
descriptors:
  - key: envoy_user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: envoy_ip
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user_id
    algorithm: token_bucket
    mode: local
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    algorithm: fixed_window
    mode: local
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shadowed
    algorithm: fixed_window
    mode: local
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: envoy_shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: soft
    algorithm: fixed_window
    mode: local
    throttle: {type: soft, overage_percent: 50}
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: old
    rate_limit: {unit: minute, requests_per_unit: 1, name: old_limit}
  - key: new
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: old_limit}]}
`

func newLocal(t testing.TB) (*Engine, *clock) {
	t.Helper()
	f, err := config.ParseRules("rules.yaml", []byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.ns.Store(t0)
	k, _ := limiter.NewKeyed(limiter.WithClock(clk))
	l, err := New(config.NewStore(rs), k, clk, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

func req(hits int64, kv ...string) *ratelimit.Request {
	r := &ratelimit.Request{Domain: "api", Hits: hits}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, ratelimit.Descriptor{Entries: []config.Entry{{Key: kv[i], Value: kv[i+1]}}})
	}
	return r
}

func check(t *testing.T, l *Engine, r *ratelimit.Request) ratelimit.Decision {
	t.Helper()
	var d ratelimit.Decision
	if err := l.Check(context.Background(), r, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func codes(d ratelimit.Decision) string {
	s := d.Code.String() + ":"
	for _, st := range d.Statuses {
		s += " " + st.Code.String()
	}
	return s
}

func TestEnvoySemanticsChargeEveryCall(t *testing.T) {
	l, _ := newLocal(t)
	steps := []struct {
		r            *ratelimit.Request
		want         string
		ipRemaining  int64
		userRemained int64
	}{
		{req(1, "envoy_user", "a", "envoy_ip", "1.2.3.4"), "allow: allow allow", 99, 1},
		{req(1, "envoy_user", "a", "envoy_ip", "1.2.3.4"), "allow: allow allow", 98, 0},
		// denied, yet both descriptors are charged, also the one within its limit
		{req(1, "envoy_user", "a", "envoy_ip", "1.2.3.4"), "deny: deny allow", 97, 0},
		{req(1, "envoy_user", "a", "envoy_ip", "1.2.3.4"), "deny: deny allow", 96, 0},
	}
	for i, s := range steps {
		d := check(t, l, s.r)
		if got := codes(d); got != s.want || d.Statuses[1].Remaining != s.ipRemaining || d.Statuses[0].Remaining != s.userRemained {
			t.Fatalf("step %d: got %s remaining user=%d ip=%d, want %s %d %d", i, got,
				d.Statuses[0].Remaining, d.Statuses[1].Remaining, s.want, s.userRemained, s.ipRemaining)
		}
	}
}

// TestPerDescriptorHits: a descriptor's own hits replace the request's
// (Envoy's descriptor-level hits_addend), also when two descriptors name
// the same counter.
func TestPerDescriptorHits(t *testing.T) {
	l, _ := newLocal(t)
	r := req(1, "envoy_ip", "9.9.9.9", "envoy_ip", "8.8.8.8", "envoy_ip", "9.9.9.9")
	r.Descriptors[0].Hits, r.Descriptors[0].HasHits = 10, true
	r.Descriptors[1].Hits, r.Descriptors[1].HasHits = 0, true // a probe
	d := check(t, l, r)
	// 9.9.9.9 is charged 10 + 1 (the request's hits for the third
	// descriptor); 8.8.8.8 is only probed.
	if got := []int64{d.Statuses[0].Remaining, d.Statuses[1].Remaining, d.Statuses[2].Remaining}; got[0] != 89 || got[1] != 100 || got[2] != 89 {
		t.Fatalf("remaining = %v, want [89 100 89]", got)
	}
	r2 := req(1, "envoy_user", "z")
	r2.Descriptors[0].Hits, r2.Descriptors[0].HasHits = 3, true
	if d := check(t, l, r2); d.Code != ratelimit.OverLimit {
		t.Fatalf("3 hits on a limit of 2: got %s, want deny", codes(d))
	}
}

func TestAlgorithmRulesChargeNothingWhenDenied(t *testing.T) {
	l, _ := newLocal(t)
	steps := []struct {
		r         *ratelimit.Request
		want      string
		tenantRem int64
	}{
		{req(1, "user_id", "u", "tenant", "acme"), "allow: allow allow", 99},
		{req(1, "user_id", "u", "tenant", "acme"), "allow: allow allow", 98},
		// the user is out of tokens: the tenant is not charged either
		{req(1, "user_id", "u", "tenant", "acme"), "deny: deny allow", 98},
		{req(1, "user_id", "u", "tenant", "acme"), "deny: deny allow", 98},
	}
	for i, s := range steps {
		d := check(t, l, s.r)
		if got := codes(d); got != s.want || d.Statuses[1].Remaining != s.tenantRem {
			t.Fatalf("step %d: got %s tenant remaining %d, want %s %d", i, got, d.Statuses[1].Remaining, s.want, s.tenantRem)
		}
	}
	d := check(t, l, req(1, "user_id", "u"))
	if wait, never := d.RetryAfter(); never || wait != 30*time.Second {
		t.Fatalf("retry after: got %v never=%v, want 30s (2 tokens per minute)", wait, never)
	}
}

func TestStatusesOfSpecialRules(t *testing.T) {
	l, clk := newLocal(t)
	cases := []struct {
		name string
		r    *ratelimit.Request
		want string
		chk  func(t *testing.T, d ratelimit.Decision)
	}{
		{"no rule matches", req(1, "nothing", "x"), "allow: allow", func(t *testing.T, d ratelimit.Decision) {
			if d.Statuses[0].Rule != nil {
				t.Fatal("status has a rule")
			}
		}},
		{"unlimited", req(1000, "free", "x"), "allow: allow", func(t *testing.T, d ratelimit.Decision) {
			if !d.Statuses[0].Rule.Unlimited {
				t.Fatal("not unlimited")
			}
		}},
		{"blocked value", req(1, "banned", "x"), "deny: deny", func(t *testing.T, d ratelimit.Decision) {
			if !d.Statuses[0].RetryNever || d.Statuses[0].ResetAfter != time.Second {
				t.Fatalf("block status: %+v", d.Statuses[0])
			}
		}},
		{"shadow algorithm rule over its limit", req(2, "shadowed", "x"), "allow: allow", func(t *testing.T, d ratelimit.Decision) {
			if !d.Statuses[0].Shadowed {
				t.Fatal("not flagged shadowed")
			}
		}},
		{"shadow envoy rule over its limit", req(2, "envoy_shadow", "x"), "allow: allow", func(t *testing.T, d ratelimit.Decision) {
			if !d.Statuses[0].Shadowed {
				t.Fatal("not flagged shadowed")
			}
		}},
		{"hits above the limit never fit", req(3, "user_id", "big"), "deny: deny", func(t *testing.T, d ratelimit.Decision) {
			if !d.Statuses[0].RetryNever {
				t.Fatal("want never")
			}
			if _, never := d.RetryAfter(); !never {
				t.Fatal("decision retry must be never")
			}
		}},
		{"probe", req(0, "user_id", "probe"), "allow: allow", func(t *testing.T, d ratelimit.Decision) {
			if d.Statuses[0].Remaining != 2 {
				t.Fatalf("probe remaining %d, want 2", d.Statuses[0].Remaining)
			}
		}},
		{"replaced rule is dropped", req(1, "old", "x", "new", "y"), "allow: allow allow", func(t *testing.T, d ratelimit.Decision) {
			if d.Statuses[0].Rule != nil || d.Statuses[1].Rule == nil || d.Statuses[1].Remaining != 4 {
				t.Fatalf("replaces: %+v", d.Statuses)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := check(t, l, c.r)
			if got := codes(d); got != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
			c.chk(t, d)
		})
	}
	// the replaced rule is not charged: twice more is fine although its limit is 1
	for range 2 {
		if d := check(t, l, req(1, "old", "x", "new", "y")); !d.Allowed() {
			t.Fatal("replaced rule still applied")
		}
	}
	_ = clk
}

func TestSoftThrottle(t *testing.T) {
	l, _ := newLocal(t)
	// limit 2, overage 50%: 3 admitted, the third flagged
	want := []struct {
		code     string
		overSoft bool
	}{{"allow: allow", false}, {"allow: allow", false}, {"allow: allow", true}, {"deny: deny", false}}
	for i, w := range want {
		d := check(t, l, req(1, "soft", "s"))
		if codes(d) != w.code || d.Statuses[0].OverSoft != w.overSoft {
			t.Fatalf("step %d: got %s overSoft=%v, want %s %v", i, codes(d), d.Statuses[0].OverSoft, w.code, w.overSoft)
		}
	}
}

func TestRequestIdempotency(t *testing.T) {
	l, clk := newLocal(t)
	r := req(1, "user_id", "idem")
	r.RequestID = "r-1"
	for i := range 3 {
		if d := check(t, l, r); !d.Allowed() || d.Statuses[0].Remaining != 1 {
			t.Fatalf("retry %d: got %s remaining %d, want allow 1", i, codes(d), d.Statuses[0].Remaining)
		}
	}
	r2 := req(1, "user_id", "idem")
	r2.RequestID = "r-2"
	if d := check(t, l, r2); d.Statuses[0].Remaining != 0 {
		t.Fatalf("second request: remaining %d, want 0", d.Statuses[0].Remaining)
	}
	clk.ns.Add(int64(2 * time.Minute)) // past the TTL: r-1 is a new request
	if d := check(t, l, r); d.Statuses[0].Remaining != 1 {
		t.Fatalf("after TTL: remaining %d, want 1 (a fresh charge on a refilled bucket)", d.Statuses[0].Remaining)
	}
}

func TestBadRequests(t *testing.T) {
	l, _ := newLocal(t)
	long := &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: make([]ratelimit.Descriptor, config.MaxDescriptors+1)}
	cases := []struct {
		name  string
		r     *ratelimit.Request
		field string
		is    error
	}{
		{"unknown domain", &ratelimit.Request{Domain: "nope", Hits: 1, Descriptors: req(1, "a", "b").Descriptors}, "domain", ratelimit.ErrUnknownDomain},
		{"empty domain", &ratelimit.Request{Hits: 1}, "domain", ratelimit.ErrBadRequest},
		{"no descriptors", &ratelimit.Request{Domain: "api", Hits: 1}, "descriptors", ratelimit.ErrNoDescriptors},
		{"negative hits", req(-1, "a", "b"), "hits", ratelimit.ErrNegativeHits},
		{"empty entries", &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{{}}}, "descriptors[0].entries", ratelimit.ErrBadRequest},
		{"empty key", req(1, "", "b"), "descriptors[0].entries[0].key", ratelimit.ErrBadRequest},
		{"too many descriptors", long, "descriptors", ratelimit.ErrBadRequest},
		{"negative descriptor hits", &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{
			{Entries: []config.Entry{{Key: "a", Value: "b"}}}, {Entries: []config.Entry{{Key: "a", Value: "b"}}, Hits: -3, HasHits: true}}},
			"descriptors[1].hits", ratelimit.ErrBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d ratelimit.Decision
			err := l.Check(context.Background(), c.r, &d)
			var fe *ratelimit.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, c.is) {
				t.Fatalf("got %v, want a ratelimit.FieldError on %s wrapping %v", err, c.field, c.is)
			}
		})
	}
}

func TestLocalCheckDoesNotAllocate(t *testing.T) {
	l, _ := newLocal(t)
	r := req(1, "envoy_ip", "1.2.3.4", "tenant", "acme")
	var d ratelimit.Decision
	l.Check(context.Background(), r, &d) // creates the keys
	allocs := testing.AllocsPerRun(200, func() {
		if err := l.Check(context.Background(), r, &d); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Check allocates %v times per call on existing keys", allocs)
	}
}

// TestLocalCharge: a cost charged after the response is never refused,
// goes past the limit so the next request is refused, is counted once
// under its request id, and may name its check's id instead of the
// descriptors.
func TestLocalCharge(t *testing.T) {
	l, _ := newLocal(t)
	ctx := context.Background()
	tenant := []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "tenant", Value: "acme"}}}}
	check := &ratelimit.Request{Domain: "api", Descriptors: tenant, Hits: 1, RequestID: "q"}
	var d ratelimit.Decision
	if err := l.Check(ctx, check, &d); err != nil || d.Code != ratelimit.OK {
		t.Fatalf("check: %v %v", d.Code, err)
	}
	for range 2 { // the retry is counted once
		if err := l.Check(ctx, &ratelimit.Request{Domain: "api", Hits: 150, RequestID: "q", Charge: true}, &d); err != nil {
			t.Fatal(err)
		}
		if d.Code != ratelimit.OK || d.Statuses[0].Remaining != 0 {
			t.Fatalf("charge: %v remaining %d", d.Code, d.Statuses[0].Remaining)
		}
	}
	if err := l.Check(ctx, &ratelimit.Request{Domain: "api", Descriptors: tenant, Hits: 0}, &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != ratelimit.OverLimit { // a probe of a key in debt: nothing is left
		t.Fatalf("a probe: %v", d.Code)
	}
	if err := l.Check(ctx, &ratelimit.Request{Domain: "api", Descriptors: tenant, Hits: 1}, &d); err != nil || d.Code != ratelimit.OverLimit {
		t.Fatalf("after a charge of 150 on 100: %v %v", d.Code, err)
	}
	var fe *ratelimit.FieldError
	if err := l.Check(ctx, &ratelimit.Request{Domain: "api", Hits: 1, RequestID: "nope", Charge: true}, &d); !errors.As(err, &fe) || fe.Field != "request_id" {
		t.Fatalf("an unknown id: %v", err)
	}
}
