package counters_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

type nopProducer struct{}

func (nopProducer) Produce(context.Context, []*eventsv1.Delta) error { return nil }
func (nopProducer) Close(context.Context) error                      { return nil }

const benchBandRules = `domain: api
descriptors:
  - key: async
    algorithm: fixed_window
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: sync
    algorithm: fixed_window
    mode: sync
    rate_limit: {unit: day, requests_per_unit: 1000000000}
`

// benchBand measures Checker.Check over the real Redis store for key, with
// cfg deciding the band (the load generator shares the 2 cores with Redis).
func benchBand(b *testing.B, key string, cfg checker.Config) {
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(b)})
	defer c.Close()
	f, _ := config.ParseRules("b.yaml", []byte(benchBandRules))
	rs, _ := config.Compile([]*config.File{f})
	ch, err := checker.New(cfg, config.NewStore(rs), counters.NewRedis(c, testsvc.Unique("bb"), 0), nopProducer{}, limiter.SystemClock{})
	if err != nil {
		b.Fatal(err)
	}
	q := &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: key, Value: "x"}}}}}
	var d ratelimit.Decision
	ctx := context.Background()
	for range 3 { // two store answers teach the key its rate
		ch.Check(ctx, q, &d)
		time.Sleep(15 * time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := ch.Check(ctx, q, &d); err != nil || !d.Allowed() {
			b.Fatalf("%v %v", err, d.Code)
		}
	}
	s := ch.Snapshot()
	b.ReportMetric(float64(s.SyncCharges)/float64(s.Decisions), "storecalls/decision")
}

func BenchmarkCheckFarBandRedis(b *testing.B) { benchBand(b, "async", checker.Config{}) }

// near: a floor above the limit keeps every decision in the near band
func BenchmarkCheckNearBandRedis(b *testing.B) {
	benchBand(b, "async", checker.Config{CheckerConfig: config.CheckerConfig{NearFloor: 2_000_000_000}})
}

func BenchmarkCheckSyncModeRedis(b *testing.B) { benchBand(b, "sync", checker.Config{}) }
