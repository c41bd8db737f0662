package counters

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// TestSyncBucketAdmitsItsBurstAtAnyRate: a fresh `mode: sync` bucket
// admits its whole burst at once, whatever its rate — also one whose time
// per token is not a whole number of microseconds (3 a second, 7 a minute),
// with the server's clock at today's date — and then refuses, answering a
// retry-after no earlier than the exact limiter's. (The script compared
// TAT + cost × T − now at a magnitude of 10^15 µs, where a double holds a
// quarter of a µs: the whole burst came out a fraction over and was
// refused.)
func TestSyncBucketAdmitsItsBurstAtAnyRate(t *testing.T) {
	targets := redisTargets(t, "%s is unset: this test needs Redis")
	rates := []struct {
		burst, tokens int64
		per           time.Duration
	}{
		{2, 3, time.Second},
		{7, 7, time.Minute},
		{10, 3, time.Hour},
		{5, 10, time.Second}, // a whole number of µs, as before
	}
	ctx := context.Background()
	for name, client := range targets {
		for _, alg := range []config.Algorithm{config.AlgTokenBucket, config.AlgGCRA, config.AlgLeakyBucket} {
			for _, rt := range rates {
				store := NewRedis(client, testsvc.Unique("b"), 0)
				mem := NewMemStore()
				q := SyncRequest{Algorithm: alg, Key: "api:b|b=v", Limit: rt.burst, Tokens: rt.tokens, Window: int64(rt.per),
					Now: w0 + 123*int64(time.Millisecond), Cost: rt.burst}
				got, err := store.ChargeSync(ctx, &q)
				if err != nil || !got.Allowed || got.Remaining != 0 {
					t.Fatalf("%s %s %d per %v, burst %d: the whole burst: %+v %v, want admitted", name, alg, rt.tokens, rt.per, rt.burst, got, err)
				}
				mem.ChargeSync(ctx, &q)
				q.Cost = 1
				got, err = store.ChargeSync(ctx, &q)
				want, _ := mem.ChargeSync(ctx, &q)
				if err != nil || got.Allowed || got.RetryAfter < want.RetryAfter || got.RetryAfter > want.RetryAfter+2*time.Microsecond {
					t.Fatalf("%s %s %d per %v: one more: %+v %v, want refused, retry-after %v rounded up to the µs", name, alg, rt.tokens, rt.per, got, err, want.RetryAfter)
				}
			}
		}
	}
}
