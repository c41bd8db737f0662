package loadgen

import (
	"context"
	"net"
	"testing"
	"time"
)

// BenchmarkRunNoop is the generator and the no-op server in one process:
// the cost of one call on both sides of gRPC, per request.
func BenchmarkRunNoop(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go mustNoop(b).Serve(ctx, lis)
	b.ReportAllocs()
	b.ResetTimer()
	res, err := Run(ctx, Config{Target: lis.Addr().String(), Requests: int64(b.N), Duration: time.Hour, Warmup: -1, Keys: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.PerSecond, "req/s")
}

// mustNoop is the no-op ceiling of the load generator's domain.
func mustNoop(t testing.TB) *Noop {
	t.Helper()
	n, err := NewNoop("bench")
	if err != nil {
		t.Fatal(err)
	}
	return n
}
