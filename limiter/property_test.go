package limiter

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func cloneState(s State) State {
	if s.log != nil {
		l := *s.log
		l.ts = append([]int64(nil), s.log.ts...)
		l.cost = append([]int64(nil), s.log.cost...)
		s.log = &l
	}
	return s
}

func drawAlgorithm(t *rapid.T) Algorithm {
	period := time.Duration(rapid.Int64Range(1, 5e9).Draw(t, "period"))
	limit := rapid.Int64Range(1, 50).Draw(t, "limit")
	tokens := rapid.Int64Range(1, 50).Draw(t, "tokens")
	switch rapid.IntRange(0, 6).Draw(t, "kind") {
	case 0:
		return TokenBucket{Capacity: limit, Refill: Rate{tokens, period}}
	case 1:
		return GCRA{Burst: limit, Rate: Rate{tokens, period}}
	case 2:
		return LeakyBucket{Capacity: limit, Leak: Rate{tokens, period}}
	case 3:
		return FixedWindow{Limit: limit, Window: period}
	case 4:
		return FixedWindow{Limit: limit, Window: period, ChargeDenied: true}
	case 5:
		return SlidingWindow{Limit: limit, Window: period}
	}
	return SlidingLog{Limit: limit, Window: period}
}

type admitted struct{ at, cost int64 }

// TestPropertyInvariants drives every algorithm with random times (some
// going backwards) and costs and checks the guarantees of the package doc.
func TestPropertyInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alg := drawAlgorithm(t)
		var s State
		// eff models the algorithm's own timeline: the latest time a call
		// committed (a rollback never moves it back). Refusals commit
		// nothing, except in the sliding log, which expires entries on
		// every valid call.
		now, eff := t0, int64(math.MinInt64)
		var log []admitted
		n := rapid.IntRange(1, 60).Draw(t, "n")
		for i := range n {
			now += rapid.Int64Range(-2e9, 3e9).Draw(t, "dt")
			cost := rapid.Int64Range(0, alg.Max()+1).Draw(t, "cost")
			before := cloneState(s)
			probeBefore, _ := alg.AllowAt(&before, now, 0)
			before = cloneState(s)
			d, err := alg.AllowAt(&s, now, cost)
			if cost > alg.Max() {
				if err == nil || !d.RetryNever() || d.Allowed {
					t.Fatalf("step %d: cost %d > max %d: got %+v, %v", i, cost, alg.Max(), d, err)
				}
			}
			if d.Remaining < 0 || d.Remaining > d.Limit {
				t.Fatalf("step %d: remaining %d outside [0, %d]", i, d.Remaining, d.Limit)
			}
			if tb, ok := alg.(TokenBucket); ok {
				if tok := tb.Tokens(&s, now); tok < 0 || tok > tb.Capacity {
					t.Fatalf("step %d: tokens %d outside [0, %d]", i, tok, tb.Capacity)
				}
			}
			_, isLog := alg.(SlidingLog)
			fw, isFixed := alg.(FixedWindow)
			if d.Allowed || (isLog && cost <= alg.Max()) || (isFixed && fw.ChargeDenied && cost <= fw.Limit) {
				eff = max(eff, now)
			}
			if d.Allowed {
				log = append(log, admitted{eff, cost})
				continue
			}
			if !isFixed || !fw.ChargeDenied {
				after := cloneState(s)
				probeAfter, _ := alg.AllowAt(&after, now, 0)
				if probeAfter.Remaining != probeBefore.Remaining {
					t.Fatalf("step %d: refusal changed remaining %d -> %d", i, probeBefore.Remaining, probeAfter.Remaining)
				}
				// RetryAfter is exact and rounded up: one ns earlier is too soon.
				if d.RetryAfter > 0 && now == eff {
					at := cloneState(before)
					if dd, _ := alg.AllowAt(&at, now+int64(d.RetryAfter), cost); !dd.Allowed {
						t.Fatalf("step %d: %T refused again at now+RetryAfter (%v)", i, alg, d.RetryAfter)
					}
					early := cloneState(before)
					if dd, _ := alg.AllowAt(&early, now+int64(d.RetryAfter)-1, cost); dd.Allowed {
						t.Fatalf("step %d: %T admitted 1ns before RetryAfter (%v)", i, alg, d.RetryAfter)
					}
				}
			}
		}
		checkBound(t, alg, log)
	})
}

// checkBound checks the admission bound of alg over every interval of log.
func checkBound(t *rapid.T, alg Algorithm, log []admitted) {
	switch a := alg.(type) {
	case TokenBucket, GCRA, LeakyBucket:
		var capacity int64
		var r Rate
		switch b := a.(type) {
		case TokenBucket:
			capacity, r = b.Capacity, b.Refill
		case GCRA:
			capacity, r = b.Burst, b.Rate
		case LeakyBucket:
			capacity, r = b.Capacity, b.Leak
		}
		for i := range log {
			var sum int64
			for j := i; j < len(log); j++ {
				sum += log[j].cost
				// admitted in [t_i, t_j] <= capacity + ceil(rate·(t_j − t_i))
				gain, _ := mul(log[j].at-log[i].at, r.Tokens).divCeil(int64(r.Period))
				if sum > capacity+gain {
					t.Fatalf("%T admitted %d in %d ns, bound %d", alg, sum, log[j].at-log[i].at, capacity+gain)
				}
			}
		}
	case FixedWindow, SlidingWindow:
		var limit, w int64
		if f, ok := a.(FixedWindow); ok {
			limit, w = f.Limit, int64(f.Window)
		} else {
			sw := a.(SlidingWindow)
			limit, w = sw.Limit, int64(sw.Window)
		}
		per := map[int64]int64{}
		for _, e := range log {
			per[WindowStart(e.at, w)] += e.cost
		}
		for start, sum := range per {
			if sum > limit {
				t.Fatalf("%T admitted %d in window %d, limit %d", alg, sum, start, limit)
			}
		}
	case SlidingLog:
		for j := range log {
			var sum int64
			for i := 0; i <= j; i++ {
				if log[i].at > log[j].at-int64(a.Window) {
					sum += log[i].cost
				}
			}
			if sum > a.Limit {
				t.Fatalf("sliding log admitted %d within a window ending at %d, limit %d", sum, log[j].at, a.Limit)
			}
		}
	}
}

// TestPropertyLeakyEqualsTokenBucket pins the meter equivalence.
func TestPropertyLeakyEqualsTokenBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := rapid.Int64Range(1, 20).Draw(t, "cap")
		r := Rate{rapid.Int64Range(1, 20).Draw(t, "tokens"), time.Duration(rapid.Int64Range(1, 3e9).Draw(t, "period"))}
		tb, lb := TokenBucket{c, r}, LeakyBucket{c, r}
		var s1, s2 State
		now := t0
		for range rapid.IntRange(1, 40).Draw(t, "n") {
			now += rapid.Int64Range(0, 1e9).Draw(t, "dt")
			cost := rapid.Int64Range(0, c).Draw(t, "cost")
			d1, _ := tb.AllowAt(&s1, now, cost)
			d2, _ := lb.AllowAt(&s2, now, cost)
			if d1 != d2 {
				t.Fatalf("token bucket %+v, leaky bucket %+v", d1, d2)
			}
		}
	})
}
