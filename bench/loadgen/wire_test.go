package loadgen

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func TestEnvoyRequestDecodes(t *testing.T) {
	for _, hits := range []uint32{1, 7} {
		b := appendEnvoy(nil, "bench", "user_id", []byte("k-42"), hits)
		var m rlsv3.RateLimitRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		want := uint32(0)
		if hits > 1 {
			want = hits
		}
		if m.Domain != "bench" || len(m.Descriptors) != 1 || len(m.Descriptors[0].Entries) != 1 ||
			m.Descriptors[0].Entries[0].Key != "user_id" || m.Descriptors[0].Entries[0].Value != "k-42" || m.HitsAddend != want {
			t.Fatalf("hits %d: decoded %v", hits, &m)
		}
	}
}

// gubernatorFields decodes one GetRateLimitsReq's first RateLimitReq into
// field number → raw value, as gubernator's generated code would read it.
func gubernatorFields(t testing.TB, b []byte) map[protowire.Number]any {
	t.Helper()
	num, typ, n := protowire.ConsumeTag(b)
	if num != 1 || typ != protowire.BytesType || n < 0 {
		t.Fatalf("not a requests field: %d %d %d", num, typ, n)
	}
	inner, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		t.Fatalf("requests field of %d bytes in %d", m, len(b))
	}
	out := map[protowire.Number]any{}
	for len(inner) > 0 {
		num, typ, n := protowire.ConsumeTag(inner)
		inner = inner[n:]
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(inner)
			out[num], inner = string(v), inner[m:]
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(inner)
			out[num], inner = v, inner[m:]
		default:
			t.Fatalf("field %d of type %d", num, typ)
		}
	}
	return out
}

func TestGubernatorRequestDecodes(t *testing.T) {
	f := gubernatorFields(t, appendGubernator(nil, "bench_user", []byte("k-1"), 3, 1000, 60000, gubernatorGlobal))
	want := map[protowire.Number]any{1: "bench_user", 2: "k-1", 3: uint64(3), 4: uint64(1000), 5: uint64(60000), 7: uint64(2)}
	for k, v := range want {
		if f[k] != v {
			t.Fatalf("field %d: got %v, want %v (all: %v)", k, f[k], v, f)
		}
	}
	if f := gubernatorFields(t, appendGubernator(nil, "n", []byte("k"), 1, 1, 1, gubernatorBatching)); f[7] != nil {
		t.Fatalf("batching (the default) is sent: %v", f)
	}
}

// gubernatorResp encodes a GetRateLimitsResp with one RateLimitResp.
func gubernatorResp(status uint64, remaining int64, errMsg string) []byte {
	var r []byte
	if status != 0 {
		r = protowire.AppendTag(r, 1, protowire.VarintType)
		r = protowire.AppendVarint(r, status)
	}
	r = protowire.AppendTag(r, 3, protowire.VarintType)
	r = protowire.AppendVarint(r, uint64(remaining))
	if errMsg != "" {
		r = protowire.AppendTag(r, 5, protowire.BytesType)
		r = protowire.AppendString(r, errMsg)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, r)
}

func TestVerdicts(t *testing.T) {
	enc := func(c rlsv3.RateLimitResponse_Code) []byte {
		b, _ := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: c, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: c, LimitRemaining: 3}}})
		return b
	}
	cases := []struct {
		name  string
		got   func() (verdict, error)
		want  verdict
		error string
	}{
		{"envoy ok", func() (verdict, error) { return envoyVerdict(enc(rlsv3.RateLimitResponse_OK)) }, admitted, ""},
		{"envoy over", func() (verdict, error) { return envoyVerdict(enc(rlsv3.RateLimitResponse_OVER_LIMIT)) }, refused, ""},
		{"envoy unknown", func() (verdict, error) { return envoyVerdict(enc(rlsv3.RateLimitResponse_UNKNOWN)) }, 0, "overall_code 0"},
		{"envoy garbage", func() (verdict, error) { return envoyVerdict([]byte{0x0a, 0xff}) }, 0, "unexpected"},
		{"gubernator under", func() (verdict, error) { return gubernatorVerdict(gubernatorResp(0, 5, "")) }, admitted, ""},
		{"gubernator over", func() (verdict, error) { return gubernatorVerdict(gubernatorResp(1, 0, "")) }, refused, ""},
		{"gubernator error", func() (verdict, error) { return gubernatorVerdict(gubernatorResp(0, 0, "bad key")) }, 0, "bad key"},
		{"gubernator empty", func() (verdict, error) { return gubernatorVerdict(nil) }, 0, "no decision"},
	}
	for i, c := range cases {
		v, err := c.got()
		if v != c.want || (c.error == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.error)) {
			t.Fatalf("step %d (%s): got %v %v, want %v %q", i, c.name, v, err, c.want, c.error)
		}
	}
}

func FuzzVerdicts(f *testing.F) {
	f.Add(gubernatorResp(1, 3, "x"))
	ok, _ := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK})
	f.Add(ok)
	f.Fuzz(func(t *testing.T, b []byte) {
		// never a panic, and a verdict only with no error
		if v, err := envoyVerdict(b); (err == nil) != (v != 0) {
			t.Fatalf("envoy: %v %v", v, err)
		}
		if v, err := gubernatorVerdict(b); (err == nil) != (v != 0) {
			t.Fatalf("gubernator: %v %v", v, err)
		}
	})
}

// fakeGubernator answers GetRateLimits from one counter per key: under
// the limit while hits fit.
type fakeGubernator struct {
	mu   sync.Mutex
	used map[string]int64
}

func (g *fakeGubernator) handle(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var b []byte
	if err := dec(&b); err != nil {
		return nil, err
	}
	f := map[protowire.Number]any{}
	num, _, n := protowire.ConsumeTag(b)
	if num == 1 {
		inner, _ := protowire.ConsumeBytes(b[n:])
		for len(inner) > 0 {
			num, typ, n := protowire.ConsumeTag(inner)
			inner = inner[n:]
			if typ == protowire.BytesType {
				v, m := protowire.ConsumeBytes(inner)
				f[num], inner = string(v), inner[m:]
			} else {
				v, m := protowire.ConsumeVarint(inner)
				f[num], inner = v, inner[m:]
			}
		}
	}
	key, _ := f[2].(string)
	hits, _ := f[3].(uint64)
	limit, _ := f[4].(uint64)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.used[key]+int64(hits) > int64(limit) {
		out := gubernatorResp(1, 0, "")
		return &out, nil
	}
	g.used[key] += int64(hits)
	out := gubernatorResp(0, int64(limit)-g.used[key], "")
	return &out, nil
}

type rawBytes struct{ rawCodec }

func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(encoding.Codec(rawBytes{})))
	register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestRunAgainstNoop: a bounded run against the no-op ceiling answers
// every request OK, spread over the keys, with latencies recorded.
func TestRunAgainstNoop(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go mustNoop(t).Serve(ctx, lis)
	var progress strings.Builder
	res, err := Run(ctx, Config{Target: lis.Addr().String(), Callers: 8, Conns: 2, Requests: 3000, Keys: 100,
		Duration: 30 * time.Second, Warmup: 100 * time.Millisecond, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 3000 || res.Admitted != 3000 || res.Errors != 0 || res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 || res.PerSecond <= 0 {
		t.Fatalf("result %+v", res)
	}
}

// TestRunGubernatorCountsRefusals: the gubernator protocol end to end
// against a fake with a limit of 50 per key over 10 keys: exactly 500
// admitted.
func TestRunGubernatorCountsRefusals(t *testing.T) {
	g := &fakeGubernator{used: map[string]int64{}}
	addr := serve(t, func(s *grpc.Server) {
		s.RegisterService(&grpc.ServiceDesc{ServiceName: "pb.gubernator.V1", HandlerType: (*any)(nil),
			Methods: []grpc.MethodDesc{{MethodName: "GetRateLimits", Handler: g.handle}}}, g)
	})
	res, err := Run(context.Background(), Config{Target: addr, Protocol: Gubernator, Callers: 4, Conns: 1, Requests: 800,
		Keys: 10, Limit: 50, KeyPrefix: "g-", Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Admitted != 500 || res.Refused != 300 || res.Errors != 0 {
		t.Fatalf("admitted %d refused %d errors %d, want 500 300 0 (%s)", res.Admitted, res.Refused, res.Errors, res.FirstErr)
	}
}

func TestRunErrors(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "no target") {
		t.Fatalf("no target: %v", err)
	}
	if _, err := Run(context.Background(), Config{Target: "x:1", Protocol: "http"}); err == nil || !strings.Contains(err.Error(), "protocol") {
		t.Fatalf("bad protocol: %v", err)
	}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := lis.Addr().String()
	lis.Close() // nothing listens there
	_, err := Run(context.Background(), Config{Target: addr, Callers: 2, Conns: 1, Duration: 300 * time.Millisecond, Warmup: -1, Timeout: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no call") {
		t.Fatalf("dead target: %v", err)
	}
}

// TestPacedRun: a paced run sends no more than its rate allows, and the
// admissions by second add up to the admissions.
func TestPacedRun(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go mustNoop(t).Serve(ctx, lis)
	res, err := Run(ctx, Config{Target: lis.Addr().String(), Callers: 4, Conns: 1, Duration: 1500 * time.Millisecond,
		Warmup: -1, Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, n := range res.AdmittedPerSecond {
		sum += n
	}
	if res.Requests == 0 || res.Requests > 100*2+4 || sum != res.Admitted || len(res.AdmittedPerSecond) > 3 {
		t.Fatalf("paced at 100/s for 1.5 s: %d requests, %d admitted, by second %v", res.Requests, res.Admitted, res.AdmittedPerSecond)
	}
}
