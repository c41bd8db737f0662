package counters

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

const w0 = int64(1_700_006_400) * 1e9

// store is what the conformance suite drives: a counter store the
// aggregator can also apply to.
type store interface {
	Store
	apply(ctx context.Context, batch []Delivered) (applied, skipped int)
}

type memStore struct{ *MemStore }

func (m memStore) apply(_ context.Context, batch []Delivered) (a, s int) {
	for _, x := range batch {
		if m.Apply(x.Partition, x.Delta) {
			a++
		} else {
			s++
		}
	}
	return a, s
}

type redisStore struct {
	*Redis
	t *testing.T
}

func (r redisStore) apply(ctx context.Context, batch []Delivered) (int, int) {
	res, err := r.ApplyBatch(ctx, batch)
	if err != nil {
		r.t.Fatal(err)
	}
	return res.Applied, res.Skipped
}

func stores(t *testing.T) map[string]store {
	t.Helper()
	out := map[string]store{"memory": memStore{NewMemStore()}}
	if addr := testsvcAddr(t, testsvc.EnvRedis); addr != nil {
		c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addr})
		t.Cleanup(func() { c.Close() })
		out["redis"] = redisStore{NewRedis(c, testsvc.Unique("t"), 0), t}
	}
	if addrs := testsvcAddr(t, testsvc.EnvRedisCluster); addrs != nil {
		c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		out["cluster"] = redisStore{NewRedis(c, testsvc.Unique("t"), 0), t}
	}
	return out
}

// testsvcAddr returns a service's addresses, or nil (no skip: the memory
// store still runs) when its variable is unset.
func testsvcAddr(t *testing.T, env string) []string {
	if getenv(env) == "" {
		return nil
	}
	if env == testsvc.EnvRedis {
		return []string{testsvc.Redis(t)}
	}
	return testsvc.RedisCluster(t)
}

func winDelta(inst string, seq uint64, key string, counted, ownAfter uint64) *eventsv1.Delta {
	return &eventsv1.Delta{InstanceId: inst, Sequence: seq, Domain: "api", RuleId: "api:k", CounterKey: key,
		Algorithm: "fixed_window", WindowStartUnixNanos: w0, WindowNanos: 60e9, Limit: 10,
		AllowedCount: counted, AllowedCost: counted, CountedCost: counted, OwnAfter: ownAfter,
		FirstUnixNanos: w0 + 1, LastUnixNanos: w0 + 2}
}

func read(t *testing.T, s store, inst, key string, kind Kind) ReadItem {
	t.Helper()
	items := []ReadItem{{Key: key, Kind: kind, Window: w0}}
	if err := s.Read(context.Background(), inst, items); err != nil {
		t.Fatal(err)
	}
	return items[0]
}

// TestStoreConformance runs the same steps on the in-memory store and on
// real Redis (standalone and cluster): the answers must agree.
func TestStoreConformance(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := "api:k|k=" + name
			// charges: limit 10, instance a has 3 unapplied hits
			q := &ChargeRequest{Key: key, Kind: KindWindow, Instance: "a/1", Now: w0 + 5e9, Cost: 4,
				Window: w0, WindowNanos: 60e9, Ceiling: 10, OwnEmitted: 3}
			res, err := s.Charge(ctx, q)
			if err != nil || !res.Allowed || res.Total != 7 || res.Own != 7 {
				t.Fatalf("charge 1: %+v %v", res, err)
			}
			q2 := &ChargeRequest{Key: key, Kind: KindWindow, Instance: "b/1", Now: w0 + 6e9, Cost: 4,
				Window: w0, WindowNanos: 60e9, Ceiling: 10}
			if res, _ := s.Charge(ctx, q2); res.Allowed || res.Total != 7 || res.Instances != 1 {
				t.Fatalf("charge over the limit: %+v", res)
			}
			q2.Cost = 3
			if res, _ := s.Charge(ctx, q2); !res.Allowed || res.Total != 10 || res.Instances != 2 {
				t.Fatalf("charge to the limit: %+v", res)
			}
			if err := s.Refund(ctx, q2); err != nil {
				t.Fatal(err)
			}
			if it := read(t, s, "b/1", key, KindWindow); it.Total != 7 || it.Own != 0 {
				t.Fatalf("after refund: %+v", it)
			}
			// a's in-flight delta (3 hits, own_after 3) arrives after the
			// charge folded them in: nothing is added twice
			a, sk := s.apply(ctx, []Delivered{{0, winDelta("a/1", 1, key, 3, 3)}})
			if a != 1 || sk != 0 {
				t.Fatalf("apply: %d %d", a, sk)
			}
			if it := read(t, s, "a/1", key, KindWindow); it.Total != 7 || it.Own != 7 {
				t.Fatalf("after the folded delta: %+v", it)
			}
			// a later delta adds; its copy (retry, replay) does not
			// own_after counts memory-path hits only: 3 before, 2 now
			a, sk = s.apply(ctx, []Delivered{{0, winDelta("a/1", 2, key, 2, 5)}, {0, winDelta("a/1", 2, key, 2, 5)}})
			if a != 1 || sk != 1 {
				t.Fatalf("apply with a copy: applied %d skipped %d", a, sk)
			}
			if it := read(t, s, "a/1", key, KindWindow); it.Total != 9 || it.Own != 9 || it.Instances != 2 {
				t.Fatalf("after the second delta: %+v", it)
			}
			// a delta without own_after (a key the checker created again)
			// adds its counted hits
			s.apply(ctx, []Delivered{{1, winDelta("c/1", 5, key, 1, 0)}})
			if it := read(t, s, "c/1", key, KindWindow); it.Total != 10 || it.Own != 1 || it.Instances != 3 {
				t.Fatalf("additive delta: %+v", it)
			}
			// a counter only deltas made (keys decided on first-touch
			// allowances): each instance counted once among its instances
			fresh := key + "|applied"
			s.apply(ctx, []Delivered{{0, winDelta("a/1", 10, fresh, 2, 2)}, {0, winDelta("a/1", 11, fresh, 1, 3)},
				{1, winDelta("d/1", 1, fresh, 4, 4)}})
			if it := read(t, s, "d/1", fresh, KindWindow); it.Total != 7 || it.Own != 4 || it.Instances != 2 {
				t.Fatalf("a counter of deltas only: %+v", it)
			}
		})
	}
}

func TestBucketConformance(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := "api:b|b=" + name
			now := w0 + 1e9
			// 10 per second, burst 5: T = 100 ms
			q := &ChargeRequest{Key: key, Kind: KindTAT, Instance: "a/1", Now: now, Cost: 5,
				WindowNanos: 1e9, Burst: 5, RateTokens: 10}
			res, err := s.Charge(ctx, q)
			if err != nil || !res.Allowed || res.Total != now+500e6 || res.Cum != 5 {
				t.Fatalf("burst: %+v %v", res, err)
			}
			q.Cost = 1 // OwnCum stays 0: the caller decided nothing in memory
			if res, _ := s.Charge(ctx, q); res.Allowed {
				t.Fatalf("over the burst: %+v", res)
			}
			q.Now = now + 100e6 // one token back
			if res, _ := s.Charge(ctx, q); !res.Allowed || res.Total != now+600e6 {
				t.Fatalf("after 100ms: %+v", res)
			}
			if it := read(t, s, "a/1", key, KindTAT); it.Cum != 6 || it.Own != 6 || it.Total != now+600e6 {
				t.Fatalf("read: %+v", it)
			}
			// a delta from another instance raises the TAT
			d := &eventsv1.Delta{InstanceId: "b/1", Sequence: 1, Domain: "api", RuleId: "api:b", CounterKey: key,
				Algorithm: "gcra", WindowNanos: 1e9, Limit: 10, RateTokens: 10, Burst: 5, AllowedCount: 2,
				AllowedCost: 2, CountedCost: 2, FirstUnixNanos: now + 100e6, LastUnixNanos: now + 100e6,
				TatAfterUnixNanos: now + 300e6, OwnAfter: 2}
			s.apply(ctx, []Delivered{{0, d}, {0, d}})
			if it := read(t, s, "b/1", key, KindTAT); it.Total != now+800e6 || it.Cum != 8 || it.Own != 2 {
				t.Fatalf("after b's delta: %+v", it)
			}
		})
	}
}

var _ = time.Second
