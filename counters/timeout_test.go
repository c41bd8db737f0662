package counters_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/breaker"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const pausedRules = `domain: api
descriptors:
  - key: sync_closed
    algorithm: fixed_window
    mode: sync
    failure: closed
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: near_open
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// TestPausedRedisCostsNoWaiting: issue 10, item 6. With CLIENT PAUSE
// 6000 ALL a mode: sync check used to take 6.0 s and succeed late. Now
// each decision gives up after the store timeout and applies the rule's
// failure policy (flagged degraded), and after breaker_failures of them
// the breaker opens: decisions stop calling Redis at all until it answers.
func TestPausedRedisCostsNoWaiting(t *testing.T) {
	pr := testsvc.StartPrivateRedis(t)
	// the request path's client settings (redis.*_timeout defaults)
	rc := redis.NewClient(&redis.Options{Addr: pr.Addr, DialTimeout: 500 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, PoolTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rc.Close()
	admin := redis.NewClient(&redis.Options{Addr: pr.Addr})
	defer admin.Close()
	f, _ := config.ParseRules("p.yaml", []byte(pausedRules))
	rs, _ := config.Compile([]*config.File{f})
	ch, err := checker.New(checker.Config{CheckerConfig: config.CheckerConfig{StoreTimeout: 150 * time.Millisecond, BreakerFailures: 3, BreakerOpenFor: time.Hour}},
		config.NewStore(rs), counters.NewRedis(rc, testsvc.Unique("pause"), 0), nopProducer{}, limiter.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(key string) ratelimit.Status {
		t.Helper()
		var d ratelimit.Decision
		q := &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: key, Value: "u"}}}}}
		if err := ch.Check(ctx, q, &d); err != nil {
			t.Fatal(err)
		}
		return d.Statuses[0]
	}
	if st := check("sync_closed"); st.Code != ratelimit.OK || st.Degraded {
		t.Fatalf("before the pause: %+v", st)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "6000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(context.Background(), "CLIENT", "UNPAUSE")
	start := time.Now()
	steps := []struct {
		key  string
		code ratelimit.Code
	}{
		{"sync_closed", ratelimit.OverLimit}, // failure: closed refuses
		{"near_open", ratelimit.OK},          // a young key is near: the store is needed; failure: open admits
		{"sync_closed", ratelimit.OverLimit}, // the third failure opens the breaker
		{"sync_closed", ratelimit.OverLimit}, // decided without a call
		{"near_open", ratelimit.OK},
	}
	for i, s := range steps {
		st := check(s.key)
		if st.Code != s.code || !st.Degraded {
			t.Fatalf("step %d (%s): %v degraded=%v, want %v degraded", i, s.key, st.Code, st.Degraded, s.code)
		}
	}
	elapsed := time.Since(start)
	state, opens, rejected := ch.Breaker()
	if state != breaker.Open || opens != 1 || rejected != 2 {
		t.Fatalf("breaker %v, opens %d, rejected %d; want open, 1, 2", state, opens, rejected)
	}
	if err := ch.StoreReady(); err == nil {
		t.Fatal("StoreReady with the breaker open")
	}
	t.Logf("5 decisions during a 6 s pause took %v (3 store timeouts, 2 refused by the breaker)", elapsed)
}
