package counters_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
	"github.com/velvetrope/velvetrope/ratelimit"
)

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() int64 { return c.ns.Load() }

// applyProducer applies emitted deltas straight to the Redis store.
type applyProducer struct {
	r *counters.Redis
	t *rapid.T
}

func (p applyProducer) Produce(ctx context.Context, ds []*eventsv1.Delta) error {
	batch := make([]counters.Delivered, len(ds))
	for i, d := range ds {
		batch[i] = counters.Delivered{Partition: 0, Delta: d}
	}
	_, err := p.r.ApplyBatch(ctx, batch)
	return err
}

func (applyProducer) Close(context.Context) error { return nil }

const exactRules = `domain: api
descriptors:
  - key: envoy
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: fixed
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: bucket
    algorithm: token_bucket
    burst: 10
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: gcra
    algorithm: gcra
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: syncmode
    algorithm: fixed_window
    mode: sync
    rate_limit: {unit: second, requests_per_unit: 5}
`

// TestAsyncOverRedisIsExact: one async checker over the real Redis store
// decides exactly as the exact engine (times on whole milliseconds, the
// resolution of the Redis scripts).
func TestAsyncOverRedisIsExact(t *testing.T) {
	addr := testsvc.Redis(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	f, err := config.ParseRules("r.yaml", []byte(exactRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"envoy", "fixed", "sliding", "bucket", "gcra", "syncmode"}
	rapid.Check(t, func(rt *rapid.T) {
		store := counters.NewRedis(c, testsvc.Unique("x"), 0)
		clk := &fakeClock{}
		clk.ns.Store(w0)
		store.PinClock(clk.Now) // the sync scripts run on the test's clock
		ch, err := checker.New(checker.Config{InstanceName: "x"}, config.NewStore(rs), store, applyProducer{store, rt}, clk)
		if err != nil {
			rt.Fatal(err)
		}
		k, _ := limiter.NewKeyed(limiter.WithClock(clk))
		exact, _ := local.New(config.NewStore(rs), k, clk, 0)
		ctx := context.Background()
		for i := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 7).Draw(rt, "op") {
			case 0:
				clk.ns.Add(rapid.Int64Range(0, 1500).Draw(rt, "ms") * 1e6)
			case 1:
				if err := ch.Flush(ctx); err != nil {
					rt.Fatal(err)
				}
			case 2:
				ch.Refresh(ctx)
			default:
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				q := &ratelimit.Request{Domain: "api", Hits: rapid.Int64Range(0, 8).Draw(rt, "hits"),
					Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: key, Value: strconv.Itoa(rapid.IntRange(0, 1).Draw(rt, "v"))}}}}}
				var da, de ratelimit.Decision
				if err := ch.Check(ctx, q, &da); err != nil {
					rt.Fatal(err)
				}
				exact.Check(ctx, q, &de)
				if da.Code != de.Code || da.Statuses[0].Remaining != de.Statuses[0].Remaining {
					rt.Fatalf("step %d %s hits %d: async %+v, exact %+v", i, key, q.Hits, da.Statuses[0], de.Statuses[0])
				}
			}
		}
	})
}
