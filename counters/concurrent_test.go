package counters

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// chargers is how many instances charge at once.
const chargers = 8

// chargesEach is how often each charges: on the memory store often
// enough that a charge which is not atomic loses updates or trips the
// runtime's concurrent map check even without -race (a few hundred
// charges did not); on Redis a few suffice, every charge is a round trip.
func chargesEach(store string) int {
	if store == "memory" {
		return 5000
	}
	return 25
}

// chargeTogether runs charge(instance) each times on each of chargers
// goroutines, all released at once, and returns how many each instance
// had admitted.
func chargeTogether(t *testing.T, each int, charge func(inst string) (bool, error)) map[string]int64 {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		got   = map[string]int64{}
		errs  = make(chan error, chargers)
	)
	for g := range chargers {
		inst := fmt.Sprintf("g%d/1", g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var n int64
			for range each {
				ok, err := charge(inst)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					n++
				}
			}
			mu.Lock()
			got[inst] = n
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return got
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// TestConcurrentChargesNearTheLimit: instances charging one counter at
// once, past its limit, get exactly the limit admitted between them, and
// the counter holds what was admitted and each instance's part of it: a
// charge is one atomic check-and-add on every store (memory, Redis, the
// cluster). A fixed window, a sliding window whose previous window still
// weighs, and a bucket, each already near its limit when the race starts.
func TestConcurrentChargesNearTheLimit(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		each := chargesEach(name)
		attempts := int64(chargers * each)
		left := attempts / 2 // what the counter has room for when the race starts
		t.Run(name+"/fixed", func(t *testing.T) {
			key := "api:c|c=fixed"
			q := ChargeRequest{Key: key, Kind: KindWindow, Instance: "seed/1", Now: w0 + 5e9, Cost: 30,
				Window: w0, WindowNanos: 60e9, Ceiling: 30 + left}
			if res, err := s.Charge(ctx, &q); err != nil || !res.Allowed {
				t.Fatalf("seed: %+v %v", res, err)
			}
			got := chargeTogether(t, each, func(inst string) (bool, error) {
				q := q
				q.Instance, q.Cost = inst, 1
				res, err := s.Charge(ctx, &q)
				return res.Allowed, err
			})
			if n := sum(got); n != left {
				t.Fatalf("admitted %d of %d concurrent charges, want exactly the %d left", n, attempts, left)
			}
			checkParts(t, s, key, KindWindow, w0, 30+left, got)
		})
		t.Run(name+"/sliding", func(t *testing.T) {
			key := "api:c|c=sliding"
			// 20 in the previous window, half way through this one: they
			// weigh 10
			prev := ChargeRequest{Key: key, Kind: KindWindow, Instance: "seed/1", Now: w0 - 30e9, Cost: 20,
				Window: w0 - 60e9, WindowNanos: 60e9, Ceiling: 10 + left, Sliding: true}
			if res, err := s.Charge(ctx, &prev); err != nil || !res.Allowed {
				t.Fatalf("seed: %+v %v", res, err)
			}
			q := ChargeRequest{Key: key, Kind: KindWindow, Now: w0 + 30e9, Cost: 1,
				Window: w0, WindowNanos: 60e9, Ceiling: 10 + left, Sliding: true}
			got := chargeTogether(t, each, func(inst string) (bool, error) {
				q := q
				q.Instance = inst
				res, err := s.Charge(ctx, &q)
				return res.Allowed, err
			})
			if n := sum(got); n != left {
				t.Fatalf("admitted %d of %d concurrent charges, want exactly %d", n, attempts, left)
			}
			checkParts(t, s, key, KindWindow, w0, left, got)
		})
		t.Run(name+"/bucket", func(t *testing.T) {
			key := "api:c|c=bucket"
			now := w0 + 1e9
			// 10 per second (100 ms a token), 15 of the burst taken: left
			// remain while the clock stands still
			q := ChargeRequest{Key: key, Kind: KindTAT, Instance: "seed/1", Now: now, Cost: 15,
				WindowNanos: 1e9, Burst: 15 + left, RateTokens: 10}
			if res, err := s.Charge(ctx, &q); err != nil || !res.Allowed {
				t.Fatalf("seed: %+v %v", res, err)
			}
			got := chargeTogether(t, each, func(inst string) (bool, error) {
				q := q
				q.Instance, q.Cost = inst, 1
				res, err := s.Charge(ctx, &q)
				return res.Allowed, err
			})
			if n := sum(got); n != left {
				t.Fatalf("admitted %d of %d concurrent charges, want exactly the %d left", n, attempts, left)
			}
			it := checkParts(t, s, key, KindTAT, 0, 15+left, got)
			if want := now + (15+left)*100e6; it.Total != want {
				t.Fatalf("TAT now + %v after the burst, want now + %v", time.Duration(it.Total-now), time.Duration(want-now))
			}
		})
	}
}

// checkParts reads key as every instance of got and checks the counter's
// total (windows: the count; buckets: the cumulative hits) is want, and
// each instance's part is what it was admitted.
func checkParts(t *testing.T, s store, key string, kind Kind, window, want int64, got map[string]int64) ReadItem {
	t.Helper()
	var it ReadItem
	for inst, n := range got {
		items := []ReadItem{{Key: key, Kind: kind, Window: window}}
		if err := s.Read(context.Background(), inst, items); err != nil {
			t.Fatal(err)
		}
		it = items[0]
		total := it.Total
		if kind == KindTAT {
			total = it.Cum
		}
		if total != want || it.Own != n || it.OwnSync != n {
			t.Fatalf("%s reads total %d, own %d (charged %d), want %d and %d", inst, total, it.Own, it.OwnSync, want, n)
		}
	}
	return it
}

// TestConcurrentSyncChargesNearTheLimit: `mode: sync` charges of one key
// from many goroutines at once admit exactly the limit, on the exact
// limiter of the memory store and on the Redis scripts, for every
// algorithm (the clock pinned: nothing refills during the race).
func TestConcurrentSyncChargesNearTheLimit(t *testing.T) {
	targets := map[string]SyncStore{"memory": NewMemStore()}
	for name, s := range stores(t) {
		if r, ok := s.(redisStore); ok {
			targets[name] = r.Redis
		}
	}
	ctx := context.Background()
	for name, s := range targets {
		for _, base := range syncCases() {
			t.Run(name+"/"+algName(base.Algorithm), func(t *testing.T) {
				q := base
				q.Key, q.Now, q.Cost = "api:c|c="+testsvc.Unique("k"), w0+123*int64(time.Millisecond), base.Limit-3
				if res, err := s.ChargeSync(ctx, &q); err != nil || !res.Allowed {
					t.Fatalf("seed: %+v %v", res, err)
				}
				got := chargeTogether(t, chargesEach(name), func(string) (bool, error) {
					q := q
					q.Cost = 1
					res, err := s.ChargeSync(ctx, &q)
					return res.Allowed, err
				})
				if n := sum(got); n != 3 {
					t.Fatalf("admitted %d of %d concurrent charges, want exactly the 3 left", n, chargers*chargesEach(name))
				}
				probe := q
				probe.Cost = 0
				if res, err := s.ChargeSync(ctx, &probe); err != nil || res.Remaining != 0 {
					t.Fatalf("after the race: %+v %v, want nothing remaining", res, err)
				}
			})
		}
	}
}
