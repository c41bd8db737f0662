package limiter

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() int64 { return c.ns.Load() }

func TestKeyedBoundedUnderManyDistinctKeys(t *testing.T) {
	k, err := NewKeyed(WithMaxKeys(1024), WithShards(16))
	if err != nil {
		t.Fatal(err)
	}
	var alg Algorithm = TokenBucket{Capacity: 10, Refill: PerSecond(1)}
	for i := range 100_000 {
		if _, err := k.AllowAt("attacker-"+strconv.Itoa(i), alg, t0+int64(i), 1, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := k.Len(); n > 1024 {
		t.Fatalf("keys held: got %d, want <= 1024", n)
	}
	if k.Evictions() < 100_000-1024 {
		t.Fatalf("evictions: got %d, want >= %d", k.Evictions(), 100_000-1024)
	}
}

// fiveEach is every algorithm admitting 5, refilling within 5 s.
func fiveEach() []Algorithm {
	return []Algorithm{
		TokenBucket{Capacity: 5, Refill: PerSecond(1)},
		GCRA{Burst: 5, Rate: PerSecond(1)},
		LeakyBucket{Capacity: 5, Leak: PerSecond(1)},
		FixedWindow{Limit: 5, Window: 5 * time.Second},
		SlidingWindow{Limit: 5, Window: 5 * time.Second},
		SlidingLog{Limit: 5, Window: 5 * time.Second},
	}
}

func TestKeyedEvictedKeyStaysExhausted(t *testing.T) {
	for _, alg := range fiveEach() {
		t.Run(strconv.Itoa(int(alg.Max()))+"/"+typeName(alg), func(t *testing.T) {
			k, _ := NewKeyed(WithMaxKeys(1), WithShards(1))
			now := w0 + 1e9
			if d, _ := k.AllowAt("victim", alg, now, 5, ""); !d.Allowed {
				t.Fatal("first burst refused")
			}
			// An attacker key pushes the victim out of the one-key table.
			k.AllowAt("other", alg, now, 1, "")
			if k.Len() != 1 || k.Evictions() != 1 {
				t.Fatalf("len %d evictions %d, want 1 and 1", k.Len(), k.Evictions())
			}
			if d, _ := k.AllowAt("victim", alg, now+1, 1, ""); d.Allowed {
				t.Fatalf("evicted exhausted key came back with room: %+v", d)
			}
			// Once the old state would be fresh, the key is whole again.
			if d, _ := k.AllowAt("victim", alg, now+20e9, 5, ""); !d.Allowed {
				t.Fatalf("key still refused after it would be fresh: %+v", d)
			}
		})
	}
}

func typeName(a Algorithm) string {
	switch a.(type) {
	case TokenBucket:
		return "token_bucket"
	case GCRA:
		return "gcra"
	case LeakyBucket:
		return "leaky_bucket"
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	}
	return "sliding_log"
}

func TestKeyedIdempotency(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(t0)
	k, _ := NewKeyed(WithClock(clk), WithIdempotency(time.Second, 100))
	var alg Algorithm = TokenBucket{Capacity: 2, Refill: Rate{0, time.Second}}
	steps := []struct {
		key, id string
		advance int64
		allowed bool
		rem     int64
	}{
		{"a", "req-1", 0, true, 1},
		{"a", "req-1", 0, true, 1}, // retry: same answer, not charged
		{"a", "req-2", 0, true, 0},
		{"a", "req-3", 0, false, 0},
		{"a", "req-3", 0, false, 0},
		{"b", "req-1", 0, true, 1},    // ids are per key
		{"a", "req-1", 2e9, false, 0}, // past the TTL: a new request, refused
	}
	for i, s := range steps {
		clk.ns.Add(s.advance)
		d, err := k.Allow(s.key, alg, 1, s.id)
		if err != nil || d.Allowed != s.allowed || d.Remaining != s.rem {
			t.Fatalf("step %d: got allowed=%v rem=%d err=%v, want %v %d", i, d.Allowed, d.Remaining, err, s.allowed, s.rem)
		}
	}
}

func TestKeyedIdempotencyBounded(t *testing.T) {
	k, _ := NewKeyed(WithShards(1), WithIdempotency(time.Hour, 64))
	var alg Algorithm = TokenBucket{Capacity: 1 << 30, Refill: PerSecond(1)}
	for i := range 10_000 {
		k.AllowAt("a", alg, t0, 1, "id-"+strconv.Itoa(i))
	}
	if n := k.ids.Len(); n > 64 {
		t.Fatalf("request ids kept: got %d, want <= 64", n)
	}
}

func TestKeyedSweep(t *testing.T) {
	k, _ := NewKeyed()
	var alg Algorithm = TokenBucket{Capacity: 2, Refill: PerSecond(1)}
	k.AllowAt("idle", alg, t0, 1, "")
	k.AllowAt("busy", alg, t0+10e9, 2, "")
	if got := k.Sweep(t0 + 10e9); got != 1 || k.Len() != 1 {
		t.Fatalf("sweep removed %d, left %d; want 1 and 1", got, k.Len())
	}
}

// TestKeyedSweepForgetsExpiredIDs: Sweep also returns the memory of
// request ids past their TTL, and only theirs.
func TestKeyedSweepForgetsExpiredIDs(t *testing.T) {
	k, _ := NewKeyed(WithIdempotency(time.Second, 1024))
	var alg Algorithm = TokenBucket{Capacity: 1 << 20, Refill: PerSecond(1)}
	for i := range 10 {
		k.AllowAt("a", alg, t0+int64(i)*1e8, 1, "id-"+strconv.Itoa(i)) // expire at t0 + 1 s + i×100 ms
	}
	steps := []struct {
		now  int64
		want int
	}{
		{t0 + 1e9 - 1, 10},
		{t0 + 1e9 + 45e7, 5},
		{t0 + 2e9, 0},
	}
	for i, s := range steps {
		k.Sweep(s.now)
		if got := k.ids.Len(); got != s.want {
			t.Fatalf("step %d: after Sweep got %d request ids, want %d", i, got, s.want)
		}
	}
}

func TestNewKeyedRejectsBadOptions(t *testing.T) {
	for i, opts := range [][]Option{
		{WithShards(3)}, {WithShards(0)}, {WithMaxKeys(1), WithShards(2)},
		{WithIdempotency(-1, 1)}, {WithClock(nil)},
	} {
		if _, err := NewKeyed(opts...); err == nil {
			t.Fatalf("case %d: NewKeyed accepted bad options", i)
		}
	}
}

func TestKeyedNegativeCost(t *testing.T) {
	k, _ := NewKeyed()
	if _, err := k.AllowAt("a", TokenBucket{1, PerSecond(1)}, t0, -1, ""); !errors.Is(err, ErrNegativeCost) {
		t.Fatalf("got %v, want ErrNegativeCost", err)
	}
}

// TestKeyedConcurrentStress hammers a few keys from many goroutines under
// -race with a shared advancing clock and checks the token bucket bound.
func TestKeyedConcurrentStress(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(t0)
	k, _ := NewKeyed(WithClock(clk), WithShards(4))
	const capacity, perSec = 50, 1000
	var alg Algorithm = TokenBucket{Capacity: capacity, Refill: PerSecond(perSec)}
	keys := []string{"a", "b", "c", "d"}
	var admitted [4]atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 3000 {
				clk.ns.Add(1000) // 1 µs per call: 1 token per ms
				ki := (g + i) % len(keys)
				if d, err := k.Allow(keys[ki], alg, 1, ""); err != nil {
					t.Error(err)
					return
				} else if d.Allowed {
					admitted[ki].Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := clk.Now() - t0
	bound := capacity + (elapsed*perSec+1e9-1)/1e9
	for i := range keys {
		if got := admitted[i].Load(); got > bound || got < capacity {
			t.Fatalf("key %s admitted %d, want between %d and %d", keys[i], got, capacity, bound)
		}
	}
}

func TestKeyedPeekChangesNothing(t *testing.T) {
	algs := []Algorithm{
		TokenBucket{Capacity: 3, Refill: PerSecond(1)}, GCRA{Burst: 3, Rate: PerSecond(1)},
		LeakyBucket{Capacity: 3, Leak: PerSecond(1)}, FixedWindow{Limit: 3, Window: time.Second},
		SlidingWindow{Limit: 3, Window: time.Second}, SlidingLog{Limit: 3, Window: time.Second},
	}
	for _, alg := range algs {
		t.Run(typeName(alg), func(t *testing.T) {
			k, _ := NewKeyed()
			if d, _ := k.PeekAt("a", alg, w0, 3); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("peek on a fresh key: %+v", d)
			}
			if k.Len() != 0 {
				t.Fatal("peek created a key")
			}
			k.AllowAt("a", alg, w0, 2, "")
			p1, _ := k.PeekAt("a", alg, w0, 2)
			p2, _ := k.PeekAt("a", alg, w0, 2)
			real, _ := k.AllowAt("a", alg, w0, 2, "")
			if p1 != p2 || p1 != real || p1.Allowed {
				t.Fatalf("peeks %+v %+v must equal the real refusal %+v", p1, p2, real)
			}
			if d, _ := k.AllowAt("a", alg, w0, 1, ""); !d.Allowed {
				t.Fatal("peek consumed budget")
			}
		})
	}
}

func TestKeyedRefund(t *testing.T) {
	algs := []Algorithm{
		TokenBucket{Capacity: 5, Refill: PerSecond(1)}, GCRA{Burst: 5, Rate: PerSecond(3)},
		LeakyBucket{Capacity: 5, Leak: PerSecond(1)}, FixedWindow{Limit: 5, Window: time.Second},
		SlidingWindow{Limit: 5, Window: time.Second}, SlidingLog{Limit: 5, Window: time.Second},
	}
	for _, alg := range algs {
		t.Run(typeName(alg), func(t *testing.T) {
			k, _ := NewKeyed()
			k.AllowAt("a", alg, w0, 2, "")
			before, _ := k.PeekAt("a", alg, w0+1, 0)
			k.AllowAt("a", alg, w0+1, 3, "")
			if err := k.RefundAt("a", alg, w0+1, 3); err != nil {
				t.Fatal(err)
			}
			after, _ := k.PeekAt("a", alg, w0+1, 0)
			if after.Remaining != before.Remaining {
				t.Fatalf("refund: remaining %d, before the charge %d", after.Remaining, before.Remaining)
			}
			// never better than fresh
			k.RefundAt("a", alg, w0+1, 100)
			if d, _ := k.PeekAt("a", alg, w0+1, 0); d.Remaining > 5 {
				t.Fatalf("refund above capacity: %d", d.Remaining)
			}
		})
	}
}

// TestKeyedReset: a reset key has its whole limit again, whether it was
// held or only remembered by a tombstone after an eviction.
func TestKeyedReset(t *testing.T) {
	for _, alg := range fiveEach() {
		for _, evicted := range []bool{false, true} {
			t.Run(typeName(alg)+"/evicted="+strconv.FormatBool(evicted), func(t *testing.T) {
				clk := &fakeClock{}
				clk.ns.Store(w0 + 1e9)
				k, _ := NewKeyed(WithMaxKeys(1), WithShards(1), WithClock(clk))
				if d, _ := k.Allow("victim", alg, 5, ""); !d.Allowed {
					t.Fatal("first burst refused")
				}
				if d, _ := k.Allow("victim", alg, 1, ""); d.Allowed {
					t.Fatal("over the limit admitted")
				}
				if evicted {
					k.Allow("other", alg, 1, "")
				}
				if held := k.Reset("victim", alg); held == evicted {
					t.Fatalf("Reset reported held=%v", held)
				}
				if d, _ := k.Allow("victim", alg, 5, ""); !d.Allowed {
					t.Fatalf("reset key refused its limit: %+v", d)
				}
				if d, _ := k.Allow("victim", alg, 1, ""); d.Allowed {
					t.Fatal("reset key admitted beyond its limit")
				}
			})
		}
	}
}
