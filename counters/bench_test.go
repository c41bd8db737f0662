package counters

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// benchApply applies batches of 1,000 deltas spread over keys counters
// (keys 0: every delta a counter never seen, as at a per-IP front) and
// reports deltas/s, Redis round trips per 1,000 deltas and, on a
// standalone server (info set), the server's CPU and commands per delta.
func benchApply(b *testing.B, client redis.UniversalClient, keys int, info *redis.Client) {
	store := NewRedis(client, testsvc.Unique("b"), 0)
	ctx := context.Background()
	names := make([]string, keys)
	for i := range names {
		names[i] = "api:k|k=" + strconv.Itoa(i)
	}
	name := func(seq uint64) string {
		if keys == 0 {
			return "api:k|k=" + strconv.FormatUint(seq, 10)
		}
		return names[int(seq)%keys]
	}
	seq := uint64(0)
	batch := make([]Delivered, 1000)
	trips := 0
	calls0, cpu0 := redisWork(b, info)
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i] = Delivered{Partition: int(seq % 8), Delta: &eventsv1.Delta{InstanceId: "c/1", Sequence: seq,
				Domain: "api", RuleId: "api:k", CounterKey: name(seq), Algorithm: "fixed_window",
				WindowStartUnixNanos: w0, WindowNanos: 60e9, Limit: 1000, AllowedCount: 1, AllowedCost: 1, CountedCost: 1,
				FirstUnixNanos: w0 + 1, LastUnixNanos: w0 + 1}}
		}
		res, err := store.ApplyBatch(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		trips += res.RoundTrips
	}
	b.StopTimer()
	deltas := float64(b.N * 1000)
	b.ReportMetric(deltas/b.Elapsed().Seconds(), "deltas/s")
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/1000deltas")
	if info != nil {
		calls1, cpu1 := redisWork(b, info)
		b.ReportMetric((cpu1-cpu0)*1e6/deltas, "redis-cpu-µs/delta")
		b.ReportMetric((calls1-calls0-1)/deltas, "redis-commands/delta")
	}
}

// redisWork reads a standalone server's commands so far (INFO
// commandstats' calls, a script's own commands included) and CPU seconds.
func redisWork(b *testing.B, c *redis.Client) (calls, cpu float64) {
	if c == nil {
		return 0, 0
	}
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			x, _ := strconv.ParseFloat(v, 64)
			cpu += x
		}
		if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			x, _ := strconv.ParseFloat(v, 64)
			cpu += x
		}
		if _, v, ok := strings.Cut(line, "calls="); ok && strings.HasPrefix(line, "cmdstat_") {
			v, _, _ = strings.Cut(v, ",")
			x, _ := strconv.ParseFloat(v, 64)
			calls += x
		}
	}
	return calls, cpu
}

func BenchmarkApplyHotKeys(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(b)})
	defer c.Close()
	benchApply(b, c, 10, c)
}

func BenchmarkApplyWideKeys(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(b)})
	defer c.Close()
	benchApply(b, c, 100_000, c)
}

// BenchmarkApplyNewKeys is a per-IP front's aggregator: every delta the
// first of its counter.
func BenchmarkApplyNewKeys(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(b)})
	defer c.Close()
	benchApply(b, c, 0, c)
}

func BenchmarkApplyWideKeysCluster(b *testing.B) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testsvc.RedisCluster(b)})
	defer c.Close()
	benchApply(b, c, 100_000, nil)
}
