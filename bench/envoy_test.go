package bench

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/velvetrope/velvetrope/aggregator"
	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/rls"
)

// benchRules: one rule per mode, limits far above what a benchmark can
// send, so every async decision is in the far band (memory only) and every
// sync decision is one atomic Redis call.
const benchRules = `domain: bench
descriptors:
  - key: async_user
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: sync_user
    algorithm: fixed_window
    mode: sync
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// Streams is the number of concurrent callers, over conns connections.
const (
	streams = 64
	conns   = 4
	users   = 1_000
)

// BenchmarkShouldRateLimit measures Envoy's ShouldRateLimit over loopback
// gRPC against one velvetrope checker on the real pipeline (Kafka producer,
// Kafka aggregator, Redis counters):
// 64 concurrent callers over 4 connections, 1,000 distinct users (warmed and refreshed before the timer, so async keys are past their young-key period), async
// mode and sync mode in the same run. The client runs in the same binary
// and shares the machine's cores with the server. It reports calls/s and
// p50/p99 latency per call.
func BenchmarkShouldRateLimit(b *testing.B) {
	rc := redis.NewClient(&redis.Options{Addr: testsvc.Redis(b), PoolSize: 128})
	defer rc.Close()
	prefix, topic, broker := testsvc.Unique("bench"), testsvc.Unique("bench"), testsvc.Kafka(b)
	store := counters.NewRedis(rc, prefix, 0)
	f, err := config.ParseRules("bench.yaml", []byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	agg, err := aggregator.NewKafka(aggregator.Config{Brokers: []string{broker}, Topic: topic, Group: testsvc.Unique("g"),
		Partitions: 4, Logger: quiet}, counters.NewRedis(rc, prefix, 0))
	if err != nil {
		b.Fatal(err)
	}
	prod, err := events.NewKafkaProducer(events.KafkaConfig{Brokers: []string{broker}, Topic: topic, Partitions: 4,
		SpillPath: b.TempDir() + "/spill", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	c, err := checker.New(checker.Config{Logger: quiet}, config.NewStore(rs), store, prod, limiter.SystemClock{})
	if err != nil {
		b.Fatal(err)
	}
	for _, start := range []func(context.Context) error{agg.Start, prod.Start, c.Start} {
		if err := start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = c.Stop(sctx)
		_ = prod.Close(sctx)
		_ = agg.Stop(sctx)
	}()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g, _ := rls.NewGRPCServer(rls.New(c, rls.Options{}))
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	var clients []rlsv3.RateLimitServiceClient
	for range conns {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}

	for _, mode := range []string{"async", "sync"} {
		b.Run(mode, func(b *testing.B) {
			reqs := make([]*rlsv3.RateLimitRequest, users)
			for i := range reqs {
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: mode + "_user", Value: "u" + strconv.Itoa(i)}}}}}
			}
			// warm the connections and the key table outside the timer,
			// and let the refresher see every key once
			for i := range users {
				if _, err := clients[i%conns].ShouldRateLimit(ctx, reqs[i]); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(time.Second)
			var next atomic.Int64
			lat := make([][]time.Duration, streams)
			for s := range lat {
				lat[s] = make([]time.Duration, 0, b.N/streams+1)
			}
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for s := range streams {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cl := clients[s%conns]
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						t := time.Now()
						resp, err := cl.ShouldRateLimit(ctx, reqs[i%users])
						lat[s] = append(lat[s], time.Since(t))
						if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
							b.Errorf("call %d: %v %v", i, resp, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "calls/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			if mode == "sync" && c.Snapshot().SyncCharges == 0 {
				b.Fatalf("sync mode made no store charges: %+v", c.Snapshot())
			}
		})
	}
}
