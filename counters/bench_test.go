package counters

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// benchApply applies batches of 1,000 deltas spread over keys counters
// and reports deltas/s and Redis round trips per 1,000 deltas.
func benchApply(b *testing.B, client redis.UniversalClient, keys int) {
	store := NewRedis(client, testsvc.Unique("b"), 0)
	ctx := context.Background()
	names := make([]string, keys)
	for i := range names {
		names[i] = "api:k|k=" + strconv.Itoa(i)
	}
	seq := uint64(0)
	batch := make([]Delivered, 1000)
	trips := 0
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i] = Delivered{Partition: int(seq % 8), Delta: &eventsv1.Delta{InstanceId: "c/1", Sequence: seq,
				Domain: "api", RuleId: "api:k", CounterKey: names[int(seq)%keys], Algorithm: "fixed_window",
				WindowStartUnixNanos: w0, WindowNanos: 60e9, Limit: 1000, AllowedCount: 1, AllowedCost: 1, CountedCost: 1,
				FirstUnixNanos: w0 + 1, LastUnixNanos: w0 + 1}}
		}
		res, err := store.ApplyBatch(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		trips += res.RoundTrips
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "deltas/s")
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/1000deltas")
}

func BenchmarkApplyHotKeys(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(b)})
	defer c.Close()
	benchApply(b, c, 10)
}

func BenchmarkApplyWideKeys(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(b)})
	defer c.Close()
	benchApply(b, c, 100_000)
}

func BenchmarkApplyWideKeysCluster(b *testing.B) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testsvc.RedisCluster(b)})
	defer c.Close()
	benchApply(b, c, 100_000)
}
