package counters_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/operate"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// The checker over the real stores: these tests live in the external test
// package, since counters must not import checker.

// w0 is the start of a minute (and of a day), as in the package's tests.
const w0 = int64(1_700_006_400) * 1e9

// TestControlsAcrossCheckers: a deny set through one checker refuses on
// another that shares the Redis store, after its poll.
func TestControlsAcrossCheckers(t *testing.T) {
	ctx := context.Background()
	f, err := config.ParseRules("r.yaml", []byte("domain: api\ndescriptors:\n  - key: ip\n    algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	for name, addrs := range map[string][]string{"redis": {testsvc.Redis(t)}, "cluster": testsvc.RedisCluster(t)} {
		rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
		t.Cleanup(func() { rc.Close() })
		store := counters.NewRedis(rc, testsvc.Unique("t"), 0)
		t.Run(name, func(t *testing.T) {
			bus, err := events.NewMemBus(1, 1<<10)
			if err != nil {
				t.Fatal(err)
			}
			mk := func() *checker.Checker {
				c, err := checker.New(checker.Config{CheckerConfig: config.CheckerConfig{ControlPoll: 20 * time.Millisecond}}, config.NewStore(rs), store, bus, limiter.SystemClock{})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Stop(ctx) })
				return c
			}
			a, b := mk(), mk()
			es := []config.Entry{{Key: "ip", Value: "10.0.0.1"}}
			q := &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: es}}}
			var d ratelimit.Decision
			if err := b.Check(ctx, q, &d); err != nil || !d.Allowed() {
				t.Fatalf("before: %v %v", d.Code, err)
			}
			if _, err := operate.New(a, store).SetControl(ctx, operate.ControlSpec{Domain: "api", Entries: es, Action: counters.ActionDeny, Reason: "abuse"}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				if err := b.Check(ctx, q, &d); err != nil {
					t.Fatal(err)
				}
				if !d.Allowed() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the other checker never applied the deny")
				}
				time.Sleep(10 * time.Millisecond) // real poller, real Redis
			}
		})
	}
}
