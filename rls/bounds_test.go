package rls

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// wireRequest builds RateLimitRequest bytes by hand: domain rl and one
// descriptor per count in entries, each of that many empty entries (what
// an attacker sends: two bytes an entry, nothing for the generated code
// to refuse).
func wireRequest(entries ...int) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, "rl")
	for _, n := range entries {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(2*n))
		for range n {
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendVarint(b, 0)
		}
	}
	return b
}

// TestWireStopsAtTheBounds: issue 19 item 6 on the gRPC path. The parser
// refuses a request at the first descriptor or entry past the bounds,
// whatever follows, without reserving anything for what it counted; the
// generated-types path gives the same error.
func TestWireStopsAtTheBounds(t *testing.T) {
	s := newTestServer(t, Options{})
	many := make([]int, 100_000)
	for i := range many {
		many[i] = 1
	}
	cases := []struct {
		name string
		raw  []byte
		want string
	}{
		{"500,000 empty entries", wireRequest(500_000), "descriptors[0].entries: more than 8 entries"},
		{"100,000 descriptors", wireRequest(many...), "descriptors: more than 16 descriptors"},
		{"the second of three", wireRequest(1, 9, 1), "descriptors[1].entries: more than 8 entries"},
		{"entries past the bound before descriptors past it", wireRequest(append([]int{9}, many[:20]...)...), "descriptors[0].entries: more than 8 entries"},
		{"at the bounds", wireRequest(8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8), "descriptors[0].entries[0].key: must not be empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := &work{raw: c.raw}
			err := w.parse(s.overrides, s.c.Rules(), &s.opts.Bounds)
			if err == nil || err.Error() != c.want {
				t.Fatalf("parse: %v, want %s", err, c.want)
			}
			if cap(w.entries) > s.opts.Bounds.MaxDescriptors*s.opts.Bounds.MaxEntries {
				t.Fatalf("parse reserved %d entries", cap(w.entries))
			}
			parse := func() { _ = (&work{raw: c.raw}).parse(s.overrides, s.c.Rules(), &s.opts.Bounds) }
			allocs := testing.AllocsPerRun(5, parse)
			for range 2 { // the process's other goroutines' allocations only add to a count: the least of three
				allocs = min(allocs, testing.AllocsPerRun(5, parse))
			}
			if allocs > 8 {
				t.Fatalf("parse allocated %v times (want a few: the error, the entries of at most the bounds)", allocs)
			}
			var req rlsv3.RateLimitRequest
			if err := proto.Unmarshal(c.raw, &req); err != nil {
				t.Fatal(err)
			}
			var ref work
			if err := ref.convert(&req, s.overrides, s.c.Rules(), &s.opts.Bounds); err == nil || err.Error() != c.want {
				t.Fatalf("convert: %v, want %s", err, c.want)
			}
		})
	}
}

// TestPutWorkDropsLargeRequests: a pooled work keeps no large request's
// memory for the next call.
func TestPutWorkDropsLargeRequests(t *testing.T) {
	s := newTestServer(t, Options{})
	w := &work{own: make([]byte, 0, 1<<20)}
	w.raw = w.own
	s.putWork(w)
	if w.raw != nil || w.own != nil {
		t.Fatalf("the pooled work kept %d bytes", cap(w.own))
	}
	w = &work{own: make([]byte, 0, 1<<10)}
	s.putWork(w)
	if cap(w.own) != 1<<10 {
		t.Fatal("a small buffer is worth keeping")
	}
}

// TestCallDeadline: a call gets a deadline at most d away, the health
// service's Watch none.
func TestCallDeadline(t *testing.T) {
	const d = time.Minute
	h := callDeadline(d)
	near, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	far, cancel2 := context.WithTimeout(context.Background(), 24*time.Hour)
	defer cancel2()
	cases := []struct {
		name   string
		ctx    context.Context
		method string
		want   time.Duration // 0: no deadline; -1: the context unchanged
	}{
		{"no deadline", context.Background(), shouldRateLimitMethod, d},
		{"a day's deadline", far, shouldRateLimitMethod, d},
		{"Envoy's 20 ms", near, shouldRateLimitMethod, -1},
		{"health check", context.Background(), "/grpc.health.v1.Health/Check", d},
		{"health watch", context.Background(), healthWatch, -1},
	}
	for _, c := range cases {
		before := time.Now()
		got, err := h(c.ctx, &tap.Info{FullMethodName: c.method})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		dl, ok := got.Deadline()
		switch {
		case c.want < 0:
			if got != c.ctx {
				t.Fatalf("%s: the context was replaced", c.name)
			}
		case !ok || dl.Before(before.Add(c.want)) || dl.After(time.Now().Add(c.want)):
			t.Fatalf("%s: deadline %v (set %v), want %v from now", c.name, dl, ok, c.want)
		}
	}
}

const shouldRateLimitMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// TestIdleStreamsAreClosed: streams that send their headers and never
// their message end with DEADLINE_EXCEEDED at CallTimeout, with no
// deadline or one far off; at most MaxConcurrentStreams run at once (the
// client library waits for a free one), and every one ends.
func TestIdleStreamsAreClosed(t *testing.T) {
	const timeout, streams, maxStreams = 200 * time.Millisecond, 12, 4
	s := newTestServer(t, Options{CallTimeout: timeout, MaxConcurrentStreams: maxStreams})
	lis := listen(t)
	g, _ := NewGRPCServer(s)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// a served call first: the connection is up and the server answers
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(),
		&rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a")}}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			ctx := context.Background()
			if i%2 == 1 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Hour) // a deadline the server does not wait for
				defer cancel()
			}
			st, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, shouldRateLimitMethod)
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = st.RecvMsg(new(rlsv3.RateLimitResponse)) // blocks until the server ends the stream
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	for i, err := range errs {
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("stream %d: %v, want DEADLINE_EXCEEDED from the server", i, err)
		}
	}
	// three rounds of four, each ended at the timeout
	if rounds := time.Duration(streams / maxStreams); elapsed < rounds*timeout || elapsed > rounds*timeout+5*time.Second {
		t.Fatalf("%d idle streams, %d at once, ended in %v; want about %v", streams, maxStreams, elapsed, rounds*timeout)
	}
	if !strings.Contains(status.Convert(errs[0]).Message(), "deadline") {
		t.Fatalf("the message: %v", errs[0])
	}
}

var tapSink context.Context

// BenchmarkCallDeadline is what the tap costs a call, beside the stream's
// own context (gRPC makes one per stream; the first case, for
// comparison): Envoy's calls carry a near deadline, kept (a clock read);
// a call with none gets one (a timer and its context).
func BenchmarkCallDeadline(b *testing.B) {
	info := &tap.Info{FullMethodName: shouldRateLimitMethod}
	near, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tapped := callDeadline(DefaultCallTimeout)
	for _, c := range []struct {
		name string
		ctx  context.Context
		tap  tap.ServerInHandle
	}{
		{"the stream's context alone", near, func(ctx context.Context, _ *tap.Info) (context.Context, error) { return ctx, nil }},
		{"near deadline", near, tapped},
		{"no deadline", context.Background(), tapped},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				stream, end := context.WithCancel(c.ctx)
				tapSink, _ = c.tap(stream, info)
				end() // the stream ends
			}
		})
	}
}
