package limiter

import (
	"math/rand/v2"
	"testing"
	"time"
)

// forceAlgorithms are one of each algorithm at a limit of 10 a second.
func forceAlgorithms() map[string]Algorithm {
	r := Rate{Tokens: 10, Period: time.Second}
	return map[string]Algorithm{
		"fixed_window":   FixedWindow{Limit: 10, Window: time.Second},
		"sliding_window": SlidingWindow{Limit: 10, Window: time.Second},
		"sliding_log":    SlidingLog{Limit: 10, Window: time.Second},
		"token_bucket":   TokenBucket{Capacity: 10, Refill: r},
		"leaky_bucket":   LeakyBucket{Capacity: 10, Leak: r},
		"gcra":           GCRA{Burst: 10, Rate: r},
	}
}

// A forced charge past the limit is counted, never refused, and the key's
// next requests are refused until the debt is paid back by time.
func TestForcePastLimitRefusesNext(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000_000)
	for name, alg := range forceAlgorithms() {
		for _, cost := range []int64{1, 9, 10, 25, 1 << 32} {
			k, _ := NewKeyed()
			if d, _ := k.AllowAt("k", alg, t0, 1, ""); !d.Allowed {
				t.Fatalf("%s: first request refused", name)
			}
			d, err := k.ForceAt("k", alg, t0, cost, "")
			if err != nil || !d.Allowed || d.RetryAfter != 0 {
				t.Fatalf("%s cost %d: ForceAt = %+v, %v; want allowed", name, cost, d, err)
			}
			if want := max(0, 10-1-cost); d.Remaining != want {
				t.Errorf("%s cost %d: remaining %d after the charge, want %d", name, cost, d.Remaining, want)
			}
			next, _ := k.AllowAt("k", alg, t0, 1, "")
			if cost >= 9 && next.Allowed {
				t.Errorf("%s cost %d: the request after a charge that spent the limit was admitted", name, cost)
			}
			if cost < 9 && !next.Allowed {
				t.Errorf("%s cost %d: refused with room left", name, cost)
			}
			if next.Remaining < 0 || next.RetryAfter < 0 && !next.RetryNever() {
				t.Errorf("%s cost %d: next = %+v", name, cost, next)
			}
			if !next.Allowed {
				if next.RetryNever() {
					t.Fatalf("%s cost %d: a debt retries never", name, cost)
				}
				at := t0 + int64(next.RetryAfter)
				if late, _ := k.PeekAt("k", alg, at, 1); !late.Allowed {
					t.Errorf("%s cost %d: refused at the retry time it gave (%v): %+v", name, cost, next.RetryAfter, late)
				}
			}
		}
	}
}

// Debt is paid back at the algorithm's rate: a bucket 25 tokens in debt
// (35 over its 10) refuses for 3.5 s, windows forget at their end.
func TestForceDebtIsPaidBack(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000_000) // a whole second
	cases := []struct {
		name      string
		free, not time.Duration // admitted at t0+free, refused at t0+not
	}{
		{"fixed_window", time.Second, 999 * time.Millisecond},
		{"sliding_log", time.Second, 999 * time.Millisecond},
		{"token_bucket", 2600 * time.Millisecond, 2400 * time.Millisecond},
		{"leaky_bucket", 2600 * time.Millisecond, 2400 * time.Millisecond},
		{"gcra", 2600 * time.Millisecond, 2400 * time.Millisecond},
	}
	for _, tc := range cases {
		alg := forceAlgorithms()[tc.name]
		k, _ := NewKeyed()
		k.ForceAt("k", alg, t0, 35, "")
		if d, _ := k.PeekAt("k", alg, t0+int64(tc.not), 1); d.Allowed {
			t.Errorf("%s: admitted at +%v, still in debt", tc.name, tc.not)
		}
		if d, _ := k.PeekAt("k", alg, t0+int64(tc.free), 1); !d.Allowed {
			t.Errorf("%s: refused at +%v, the debt is paid: %+v", tc.name, tc.free, d)
		}
	}
}

// Debt is bounded: a charge of 2^32 hits on a limit of 10 a second is
// paid back within a hundred capacities' time, and later charges add no
// more.
func TestForceDebtBounded(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000_000)
	for _, name := range []string{"token_bucket", "leaky_bucket", "gcra"} {
		alg := forceAlgorithms()[name]
		k, _ := NewKeyed()
		for range 3 {
			k.ForceAt("k", alg, t0, 1<<32, "")
		}
		if d, _ := k.PeekAt("k", alg, t0+int64(102*time.Second), 1); !d.Allowed {
			t.Errorf("%s: still refused after 102 s: %+v", name, d)
		}
		if d, _ := k.PeekAt("k", alg, t0+int64(95*time.Second), 1); d.Allowed {
			t.Errorf("%s: admitted after 95 s, the debt was bounded below a hundred capacities", name)
		}
	}
}

// A request id makes a charge idempotent: a retry is answered the same
// and counted once.
func TestForceIdempotent(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000_000)
	alg := forceAlgorithms()["fixed_window"]
	k, _ := NewKeyed(WithIdempotency(time.Minute, 100))
	a, _ := k.ForceAt("k", alg, t0, 4, "r1")
	b, _ := k.ForceAt("k", alg, t0, 4, "r1")
	if a != b || a.Remaining != 6 {
		t.Fatalf("retry answered %+v, first %+v", b, a)
	}
	if d, _ := k.PeekAt("k", alg, t0, 0); d.Remaining != 6 {
		t.Fatalf("remaining %d after a charge and its retry, want 6", d.Remaining)
	}
}

// Property: for any mix of admissions and forced charges, the hits a
// window counts are the admitted plus the forced, and admissions never
// happen while the count is at or past the limit.
func TestForceWindowProperty(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		alg := FixedWindow{Limit: 50, Window: time.Hour}
		var s State
		const now = int64(3600e9)
		var counted int64
		for range 100 {
			cost := rnd.Int64N(20)
			if rnd.IntN(3) == 0 {
				var d Decision
				if err := Force(alg, &s, now, cost, &d); err != nil {
					t.Fatal(err)
				}
				counted += cost
				continue
			}
			d, _ := alg.AllowAt(&s, now, cost)
			if d.Allowed {
				if counted+cost > 50 {
					t.Fatalf("admitted %d with %d counted of 50", cost, counted)
				}
				counted += cost
			}
		}
		if _, c := alg.current(&s, now); c != counted {
			t.Fatalf("window holds %d, counted %d", c, counted)
		}
	}
}

func TestForceRejectsNegativeCost(t *testing.T) {
	k, _ := NewKeyed()
	if _, err := k.ForceAt("k", forceAlgorithms()["gcra"], 1, -1, ""); err != ErrNegativeCost {
		t.Fatalf("err %v, want ErrNegativeCost", err)
	}
}
