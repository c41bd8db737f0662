package rlqs

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const rules = `domain: envoy
descriptors:
  - key: name
    rlqs: {bucket_keys: [name, tenant]}
    descriptors:
      - key: tenant
        algorithm: fixed_window
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: api
    rlqs: {bucket_keys: [api]}
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 60}
`

// clock is the server's clock, moved by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type rig struct {
	srv    *Server
	chk    *checker.Checker
	client rlqsv3.RateLimitQuotaServiceClient
	clk    *clock
}

func newRig(t *testing.T, opts Options) *rig {
	t.Helper()
	ms := counters.NewMemStore()
	bus, err := events.NewMemBus(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	chk, err := checker.New(checker.Config{}, testrules.Store(t, rules), ms, bus, testrules.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	opts.Now = clk.now
	srv := New(chk, opts)
	g := grpc.NewServer()
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rig{srv: srv, chk: chk, client: rlqsv3.NewRateLimitQuotaServiceClient(conn), clk: clk}
}

type proxy struct {
	t       *testing.T
	stream  grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	cancel  context.CancelFunc
	current map[string]*typev3.RateLimitStrategy // by bucket, the assignment in force
}

func (r *rig) open(t *testing.T) *proxy {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := r.client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &proxy{t: t, stream: s, cancel: cancel, current: map[string]*typev3.RateLimitStrategy{}}
}

func bucketID(kv ...string) *rlqsv3.BucketId {
	b := &rlqsv3.BucketId{Bucket: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		b.Bucket[kv[i]] = kv[i+1]
	}
	return b
}

func (p *proxy) report(domain string, id *rlqsv3.BucketId, allowed, denied uint64) {
	p.t.Helper()
	err := p.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: id, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: allowed, NumRequestsDenied: denied}}})
	if err != nil {
		p.t.Fatal(err)
	}
}

// next is the next action the server sends (Envoy reports on its timer
// only, not when an assignment changes).
func (p *proxy) next() *rlqsv3.RateLimitQuotaResponse_BucketAction {
	p.t.Helper()
	return p.recv()
}

func (p *proxy) recv() *rlqsv3.RateLimitQuotaResponse_BucketAction {
	p.t.Helper()
	m, err := p.stream.Recv()
	if err != nil {
		p.t.Fatal(err)
	}
	if len(m.BucketAction) != 1 {
		p.t.Fatalf("%d actions", len(m.BucketAction))
	}
	return m.BucketAction[0]
}

// tokens is an assignment's token bucket size (-1: DENY_ALL, -2:
// ALLOW_ALL).
func tokens(t *testing.T, a *rlqsv3.RateLimitQuotaResponse_BucketAction) int64 {
	t.Helper()
	qa := a.GetQuotaAssignmentAction()
	if qa == nil {
		t.Fatalf("not an assignment: %v", a)
	}
	if ttl := qa.GetAssignmentTimeToLive().AsDuration(); ttl < 2*time.Second {
		t.Fatalf("assignment TTL %v: under two reporting intervals", ttl)
	}
	s := qa.GetRateLimitStrategy()
	switch {
	case s.GetTokenBucket() != nil:
		return int64(s.GetTokenBucket().GetMaxTokens())
	case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		return -1
	}
	return -2
}

// TestAssignmentsFollowTheBudget: one proxy's bucket is granted what
// remains of its rule (100 an hour); reports are charged, and a grant
// whose tokens the proxy still holds is extended as it is (the proxy
// keeps its bucket); the budget spent elsewhere shrinks it; the checker's
// own decisions see the reports.
func TestAssignmentsFollowTheBudget(t *testing.T) {
	r := newRig(t, Options{})
	p := r.open(t)
	id := bucketID("name", "api", "tenant", "acme")
	p.report("envoy", id, 0, 0)
	first := p.next()
	if n := tokens(t, first); n != 100 {
		t.Fatalf("first assignment: %d tokens, want 100", n)
	}
	p.report("", id, 60, 3)
	if a := p.next(); !proto.Equal(a.GetQuotaAssignmentAction().GetRateLimitStrategy(), first.GetQuotaAssignmentAction().GetRateLimitStrategy()) {
		t.Fatalf("after 60 of 100 admitted the proxy holds the 40 left: want the same strategy, got %v", a)
	}
	// 30 admitted by the checker itself: the proxy's 40 are more than remains
	for range 30 {
		var d ratelimit.Decision
		req := &ratelimit.Request{Domain: "envoy", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "name", Value: "api"}, {Key: "tenant", Value: "acme"}}}}}
		if err := r.chk.Check(context.Background(), req, &d); err != nil || d.Code != ratelimit.OK {
			t.Fatalf("a direct decision: %v %v", d.Code, err)
		}
	}
	p.report("", id, 0, 0)
	if n := tokens(t, p.next()); n != -1 {
		t.Fatalf("after 30 spent elsewhere: %d, want DENY_ALL until the proxy says what its old grant spent", n)
	}
	p.report("", id, 0, 0)
	if n := tokens(t, p.next()); n != 10 {
		t.Fatalf("then: %d tokens, want the 10 left", n)
	}
	p.report("", id, 10, 10)
	if n := tokens(t, p.next()); n != 10 {
		t.Fatalf("spent: the same grant extended (no tokens left to it), got %d", n)
	}
	var d ratelimit.Decision
	req := &ratelimit.Request{Domain: "envoy", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "name", Value: "api"}, {Key: "tenant", Value: "acme"}}}}}
	if err := r.chk.Check(context.Background(), req, &d); err != nil || d.Code != ratelimit.OverLimit {
		t.Fatalf("the checker after the reports: %v %v", d.Code, err)
	}
	// an unknown bucket is let through, as a descriptor without a rule
	p.report("", bucketID("name", "api"), 5, 0)
	if n := tokens(t, p.next()); n != -2 {
		t.Fatalf("unmapped bucket: %d, want ALLOW_ALL", n)
	}
	// a bucket rule: a token bucket of the stream's share, refilled at its rate
	p.report("", bucketID("api", "search"), 0, 0)
	a := p.next()
	tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb == nil || tb.GetMaxTokens() != 60 || tb.GetTokensPerFill().GetValue() != 1 || tb.GetFillInterval().AsDuration() != time.Second {
		t.Fatalf("bucket rule's assignment: %v", a)
	}
}

// TestAJoiningStreamShrinksTheOthers: when a second proxy reports the
// bucket, the first is sent a new grant at once, without reporting; as
// the new grant replaces its bucket, what the old one held may have been
// spent unreported, so nobody is granted it until the first proxy's next
// report says: then the two share the budget.
func TestAJoiningStreamShrinksTheOthers(t *testing.T) {
	r := newRig(t, Options{})
	a, b := r.open(t), r.open(t)
	id := bucketID("name", "api", "tenant", "acme")
	a.report("envoy", id, 0, 0)
	if n := tokens(t, a.next()); n != 100 {
		t.Fatalf("alone: %d", n)
	}
	b.report("envoy", id, 0, 0)
	if nb, na := tokens(t, b.next()), tokens(t, a.next()); na != -1 || nb != -1 {
		t.Fatalf("a joins: %d and %d, want DENY_ALL for both while a's 100 are unconfirmed", na, nb)
	}
	a.report("", id, 20, 0) // a had spent 20 of its 100
	if n := tokens(t, a.next()); n != 60 {
		t.Fatalf("a's part of the 80 left (by its demand): %d, want 60", n)
	}
	b.report("", id, 0, 0)
	if n := tokens(t, b.next()); n != 20 {
		t.Fatalf("b's part: %d, want the 20 a does not hold", n)
	}
	// demand moves the parts: a reports 40 requests, b none
	a.report("", id, 30, 10)
	b.report("", id, 0, 0)
	if n := tokens(t, a.next()); n < 10 {
		t.Fatalf("the busy proxy's grant: %d", n)
	}
	if n := tokens(t, b.next()); n > 40 {
		t.Fatalf("the idle proxy's grant grew: %d", n)
	}
}

// TestALostStreamKeepsItsAssignmentCounted: a proxy granted 100 that
// reported 10 and is gone may still admit from its assignment: the other
// 90 are counted spent, so another proxy is not given them again.
func TestALostStreamKeepsItsAssignmentCounted(t *testing.T) {
	r := newRig(t, Options{})
	a := r.open(t)
	id := bucketID("name", "api", "tenant", "acme")
	a.report("envoy", id, 0, 0)
	tokens(t, a.next())
	a.report("", id, 10, 0)
	if n := tokens(t, a.next()); n != 100 {
		t.Fatalf("after 10: %d, want the same grant (90 left to it)", n)
	}
	a.cancel()
	deadline := time.Now().Add(5 * time.Second)
	for r.srv.Buckets() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the server notices the stream's end
	}
	b := r.open(t)
	b.report("envoy", id, 0, 0)
	if n := tokens(t, b.next()); n != -1 {
		t.Fatalf("after a lost stream's 90: %d, want DENY_ALL", n)
	}
	if r.srv.Stats.Unreported.Load() != 90 {
		t.Fatalf("unreported charged %d, want 90", r.srv.Stats.Unreported.Load())
	}
}

// TestIdleBucketsAreAbandoned: a bucket whose reports hold no request for
// IdleAfter is abandoned.
func TestIdleBucketsAreAbandoned(t *testing.T) {
	r := newRig(t, Options{IdleAfter: time.Minute})
	p := r.open(t)
	id := bucketID("name", "api", "tenant", "idle")
	p.report("envoy", id, 1, 0)
	tokens(t, p.next())
	r.clk.add(61 * time.Second)
	p.report("", id, 0, 0)
	if a := p.next(); a.GetAbandonAction() == nil {
		t.Fatalf("idle bucket: %v, want AbandonAction", a)
	}
	if r.srv.Buckets() != 0 {
		t.Fatal("the abandoned bucket is still held")
	}
}

// TestBadStreams: every malformed report ends the stream with
// InvalidArgument naming what is wrong.
func TestBadStreams(t *testing.T) {
	r := newRig(t, Options{})
	id := bucketID("name", "api", "tenant", "acme")
	huge := bucketID()
	for i := range 9 {
		huge.Bucket[string(rune('a'+i))] = "x"
	}
	cases := []struct {
		name string
		msgs []*rlqsv3.RateLimitQuotaUsageReports
		want string
	}{
		{"no domain", []*rlqsv3.RateLimitQuotaUsageReports{{}}, "domain"},
		{"unknown domain", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "nope"}}, "has no rules"},
		{"domain changed", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "envoy"}, {Domain: "other"}}, "one domain"},
		{"empty bucket", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: bucketID()}}}}, "bucket_id"},
		{"too many keys", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: huge}}}}, "more than 8 keys"},
		{"huge counts", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: id, NumRequestsAllowed: 1 << 40}}}}, "at most"},
		{"an empty key", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: bucketID("", "x")}}}}, "key must not be empty"},
		{"invalid duration", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: id, TimeElapsed: &durationpb.Duration{Nanos: 2e9}}}}}, "time_elapsed"},
		{"negative elapsed", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: id, TimeElapsed: durationpb.New(-time.Second)}}}}, "time_elapsed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := r.open(t)
			for _, m := range c.msgs {
				_ = p.stream.Send(m)
			}
			var err error
			for err == nil {
				_, err = p.stream.Recv()
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
				t.Fatalf("%v, want InvalidArgument with %q", err, c.want)
			}
		})
	}
}

// TestUnreportedSpendingIsNeverGrantedAgain (found by a probe): a proxy
// that spent its whole grant without reporting when another joins cannot
// be given a fresh grant on top of it: the joiner waits for its report,
// and the two never admit more than the budget. On a bucket rule too.
func TestUnreportedSpendingIsNeverGrantedAgain(t *testing.T) {
	for _, c := range []struct {
		name  string
		id    *rlqsv3.BucketId
		limit int64
	}{{"window", bucketID("name", "api", "tenant", "greedy"), 100}, {"bucket", bucketID("api", "greedy"), 60}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, Options{})
			a, b := r.open(t), r.open(t)
			a.report("envoy", c.id, 0, 0)
			if n := tokens(t, a.next()); n != c.limit {
				t.Fatalf("alone: %d", n)
			}
			// a spends all of it, unreported; b joins
			b.report("envoy", c.id, 0, 0)
			granted := int64(0)
			for _, n := range []int64{tokens(t, b.next()), tokens(t, a.next())} {
				granted += max(n, 0)
			}
			if granted != 0 {
				t.Fatalf("granted %d while a's %d may be spent", granted, c.limit)
			}
			a.report("", c.id, uint64(c.limit), 0)
			b.report("", c.id, 0, 0)
			if na, nb := tokens(t, a.next()), tokens(t, b.next()); na != -1 || nb != -1 {
				t.Fatalf("after a's report of %d: %d and %d, want DENY_ALL for both", c.limit, na, nb)
			}
		})
	}
}

// TestOneAnswerPerReport: a report of many buckets is answered in one
// message, every bucket's action in it (a 64-message queue dropped most
// of a 1,000-bucket report's answers).
func TestOneAnswerPerReport(t *testing.T) {
	r := newRig(t, Options{})
	p := r.open(t)
	msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: "envoy"}
	for i := range MaxUsagesPerReport {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: bucketID("name", "api", "tenant", fmt.Sprint(i)), TimeElapsed: durationpb.New(time.Second)})
	}
	for range 3 {
		if err := p.stream.Send(msg); err != nil {
			t.Fatal(err)
		}
		m, err := p.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.BucketAction) != MaxUsagesPerReport {
			t.Fatalf("%d actions for %d buckets", len(m.BucketAction), MaxUsagesPerReport)
		}
	}
}
