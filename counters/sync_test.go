package counters

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

type syncStep struct {
	dtMS  int64
	cost  int64
	force bool // a cost charged after the response (SyncRequest.Force)
}

// syncCases are the conformance cases: each algorithm with parameters
// whose per-token time is a whole number of microseconds (the scripts'
// resolution), and a fixed walk of times and costs: refills, window
// rollovers, refusals, probes, costs that never fit, clock standing still.
func syncCases() []SyncRequest {
	return []SyncRequest{
		{Algorithm: "", Limit: 10, Window: int64(time.Second)},
		{Algorithm: "fixed_window", Limit: 10, Window: int64(time.Second)},
		{Algorithm: "sliding_window", Limit: 10, Window: int64(time.Second)},
		{Algorithm: "token_bucket", Limit: 8, Tokens: 20, Window: int64(time.Second)},
		{Algorithm: "gcra", Limit: 5, Tokens: 10, Window: int64(time.Second)},
		{Algorithm: "leaky_bucket", Limit: 6, Tokens: 4, Window: int64(time.Second)},
		{Algorithm: "sliding_log", Limit: 7, Window: int64(time.Second)},
	}
}

func walk(seed uint64) []syncStep {
	r := rand.New(rand.NewPCG(seed, 7))
	steps := make([]syncStep, 250)
	for i := range steps {
		s := syncStep{cost: int64(r.IntN(5))}
		switch r.IntN(6) {
		case 0:
			s.dtMS = int64(r.IntN(1200))
		case 1:
			s.dtMS = int64(r.IntN(60))
		}
		if r.IntN(25) == 0 {
			s.cost = 12 // never fits
		}
		steps[i] = s
	}
	return steps
}

// forcedWalk is walk with some steps forced charges, of up to 40 hits:
// counters past their limits, buckets in debt, logs over full.
func forcedWalk(seed uint64) []syncStep {
	steps := walk(seed)
	r := rand.New(rand.NewPCG(seed, 11))
	for i := range steps {
		if r.IntN(8) == 0 {
			steps[i].force, steps[i].cost = true, int64(r.IntN(41))
		}
	}
	return steps
}

// TestSyncConformance runs the same steps through the exact in-process
// limiter and through the Redis scripts (standalone and cluster) with the
// scripts' clock pinned: decisions and remaining counts must be identical,
// and the retry-after and reset the scripts answer the limiter's rounded
// up to their microsecond. Forced charges (counted past the limit) are in
// the walk.
func TestSyncConformance(t *testing.T) {
	targets := redisTargets(t, "%s is unset: the Redis side of the conformance suite needs `make test`")
	ctx := context.Background()
	for name, client := range targets {
		for i, base := range syncCases() {
			t.Run(name+"/"+algName(base.Algorithm), func(t *testing.T) {
				store := NewRedis(client, testsvc.Unique("s"), 0)
				mem := NewMemStore()
				now := w0 + 123*int64(time.Millisecond)
				for j, st := range forcedWalk(uint64(i)) {
					now += st.dtMS * int64(time.Millisecond)
					q := base
					q.Key, q.Cost, q.Now, q.Force = "api:k|k=v", st.cost, now, st.force
					want, err := mem.ChargeSync(ctx, &q)
					if err != nil {
						t.Fatal(err)
					}
					got, err := store.ChargeSync(ctx, &q)
					if err != nil {
						t.Fatal(err)
					}
					// the scripts count in µs: their waits are the limiter's
					// rounded up to the µs, never earlier
					if got.Allowed != want.Allowed || got.Remaining != want.Remaining ||
						got.RetryAfter != upToMicro(want.RetryAfter) || got.ResetAfter != upToMicro(want.ResetAfter) {
						t.Fatalf("step %d (+%dms, cost %d, force %v): redis %+v, limiter %+v", j, st.dtMS, st.cost, st.force, got, want)
					}
					if st.force && (!got.Allowed || got.RetryAfter != 0) {
						t.Fatalf("step %d: a forced charge was refused: %+v", j, got)
					}
				}
			})
		}
	}
}

// redisTargets are the real Redis servers the suite has, by name
// (standalone, cluster), closed when the test ends; none: the test is
// skipped with why, a format of the variable's name.
func redisTargets(t *testing.T, why string) map[string]redis.UniversalClient {
	t.Helper()
	targets := map[string]redis.UniversalClient{}
	if getenv(testsvc.EnvRedis) != "" {
		targets["redis"] = redis.NewClient(&redis.Options{Addr: testsvc.Redis(t)})
	}
	if getenv(testsvc.EnvRedisCluster) != "" {
		targets["cluster"] = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testsvc.RedisCluster(t)})
	}
	if len(targets) == 0 {
		t.Skipf(why, testsvc.EnvRedis)
	}
	for _, c := range targets {
		t.Cleanup(func() { c.Close() })
	}
	return targets
}

// upToMicro rounds a wait up to the microsecond (Never stays Never).
func upToMicro(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

func algName(a config.Algorithm) string {
	if a == "" {
		return "envoy"
	}
	return string(a)
}

// TestSyncIdempotencyAndRefund: a retried request id is answered from the
// store and not charged; a refund gives the hits back.
func TestSyncIdempotencyAndRefund(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(t)})
	defer c.Close()
	ctx := context.Background()
	for _, base := range syncCases() {
		t.Run(algName(base.Algorithm), func(t *testing.T) {
			store := NewRedis(c, testsvc.Unique("i"), 0)
			q := base
			q.Key, q.Cost, q.Now = "api:k|k=v", 2, w0+int64(time.Millisecond)
			q.RequestID, q.IdempotencyTTL = "req-1", time.Minute
			first, err := store.ChargeSync(ctx, &q)
			if err != nil || !first.Allowed {
				t.Fatalf("first: %+v %v", first, err)
			}
			again, _ := store.ChargeSync(ctx, &q)
			if again != first {
				t.Fatalf("retry answered %+v, first %+v", again, first)
			}
			probe := q
			probe.RequestID, probe.Cost = "", 0
			p1, _ := store.ChargeSync(ctx, &probe)
			if p1.Remaining != first.Remaining {
				t.Fatalf("the retry was charged: remaining %d, after the first %d", p1.Remaining, first.Remaining)
			}
			if err := store.RefundSync(ctx, &q, first.Token); err != nil {
				t.Fatal(err)
			}
			p2, _ := store.ChargeSync(ctx, &probe)
			if p2.Remaining != first.Remaining+2 {
				t.Fatalf("after refund: remaining %d, want %d", p2.Remaining, first.Remaining+2)
			}
		})
	}
}

// TestPlainSyncConformance: `mode: sync` fixed and Envoy windows decided
// with plain commands (INCRBY, PEXPIREAT, a DECRBY taking a refusal back)
// on the caller's clock answer as the exact in-process limiter does, over
// the conformance walk, batched as the checker sends them; the window's
// key always has its expiry, refusals included.
func TestPlainSyncConformance(t *testing.T) {
	targets := redisTargets(t, "%s is unset: the Redis side of the conformance suite needs `make test`")
	ctx := context.Background()
	for name, client := range targets {
		for i, base := range syncCases()[:2] { // Envoy's window and the fixed window
			t.Run(name+"/"+algName(base.Algorithm), func(t *testing.T) {
				store := NewRedis(client, testsvc.Unique("p"), 0)
				mem := NewMemStore()
				// the real clock (its expiries are instants Redis keeps),
				// aligned as the walk's: the walk only runs ahead of it
				now := time.Now().Truncate(time.Second).UnixNano() + 123*int64(time.Millisecond)
				for j, st := range walk(uint64(i)) {
					now += st.dtMS * int64(time.Millisecond)
					q := base
					q.Key, q.Cost, q.Now = "api:k|k=v", st.cost, now
					want, err := mem.ChargeSync(ctx, &q)
					if err != nil {
						t.Fatal(err)
					}
					q.Now, q.Clock = 0, now
					if !plain(&q) {
						t.Fatal("not decided with plain commands")
					}
					// beside a bucket's scripted decision in the same batch
					other := SyncRequest{Key: "api:b|b=v", Algorithm: "token_bucket", Limit: 5, Tokens: 5, Window: int64(time.Second), Cost: 1}
					ops := []*Op{{Sync: true, SyncReq: other}, {Sync: true, SyncReq: q}}
					store.Do(ctx, ops)
					got := ops[1].SyncAnswer
					if ops[0].Err != nil || ops[1].Err != nil {
						t.Fatalf("step %d: %v %v", j, ops[0].Err, ops[1].Err)
					}
					if got.Allowed != want.Allowed || got.Remaining != want.Remaining ||
						got.RetryAfter != upToMicro(want.RetryAfter) || got.ResetAfter != upToMicro(want.ResetAfter) {
						t.Fatalf("step %d (+%dms, cost %d): plain %+v, limiter %+v", j, st.dtMS, st.cost, got, want)
					}
					if st.cost > 0 && st.cost <= base.Limit {
						stem := store.base(q.Key + "|" + string(q.Algorithm))
						if ttl := client.PTTL(ctx, stem+":s:"+got.Token).Val(); ttl <= 0 {
							t.Fatalf("step %d: the window's key has no expiry (%v)", j, ttl)
						}
					}
				}
			})
		}
	}
}

// TestPlainSyncBatchDecidesInOrder: several decisions of one window in one
// batch (the batcher merges a hot key's) are decided as the script and the
// exact limiter decide them one after another: a refusal's hits never
// refuse the decision after it.
func TestPlainSyncBatchDecidesInOrder(t *testing.T) {
	targets := redisTargets(t, "%s is unset: the Redis side of the conformance suite needs `make test`")
	ctx := context.Background()
	for name, client := range targets {
		for _, base := range syncCases()[:2] {
			t.Run(name+"/"+algName(base.Algorithm), func(t *testing.T) {
				store := NewRedis(client, testsvc.Unique("o"), 0)
				mem := NewMemStore()
				rng := rand.New(rand.NewPCG(3, 9))
				now := time.Now().Truncate(time.Second).UnixNano() + 123*int64(time.Millisecond)
				for step := range 120 {
					now += int64(rng.IntN(4)) * 97 * int64(time.Millisecond)
					var ops []*Op
					var want []SyncResult
					for range 1 + rng.IntN(6) {
						q := base
						q.Key, q.Cost, q.Now = "api:k|k=v", int64(rng.IntN(5)), now
						if rng.IntN(12) == 0 {
							q.Cost = 12 // never fits
						}
						w, err := mem.ChargeSync(ctx, &q)
						if err != nil {
							t.Fatal(err)
						}
						want = append(want, w)
						q.Now, q.Clock = 0, now
						ops = append(ops, &Op{Sync: true, SyncReq: q})
					}
					store.Do(ctx, ops)
					for i, op := range ops {
						got, w := op.SyncAnswer, want[i]
						if op.Err != nil || got.Allowed != w.Allowed || got.Remaining != w.Remaining ||
							got.RetryAfter != upToMicro(w.RetryAfter) || got.ResetAfter != upToMicro(w.ResetAfter) {
							t.Fatalf("step %d, decision %d of %d (cost %d): plain %+v %v, limiter %+v", step, i, len(ops),
								op.SyncReq.Cost, got, op.Err, w)
						}
					}
				}
			})
		}
	}
}
