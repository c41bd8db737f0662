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
// going backwards) and costs and checks the guarantees of the package doc
// on every step: the decision's numbers are exact (what Remaining says is
// what a further request can take, RetryAfter and ResetAfter are the
// first nanosecond they promise), a refusal changes nothing, and what is
// admitted stays within the algorithm's bound over every interval.
func TestPropertyInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alg := drawAlgorithm(t)
		var s State
		// eff models the algorithm's own timeline: the latest time a call
		// committed (a rollback never moves it back). Refusals commit
		// nothing, except in the sliding log, which expires entries on
		// every valid call.
		now, eff := t0, int64(math.MinInt64)
		_, isLog := alg.(SlidingLog)
		fw, isFixed := alg.(FixedWindow)
		chargeDenied := isFixed && fw.ChargeDenied
		var log []admitted
		n := rapid.IntRange(1, 60).Draw(t, "n")
		for i := range n {
			now += rapid.Int64Range(-2e9, 3e9).Draw(t, "dt")
			cost := rapid.Int64Range(0, alg.Max()+1).Draw(t, "cost")
			before := cloneState(s)
			probeBefore, _ := alg.AllowAt(&before, now, 0)
			d, err := alg.AllowAt(&s, now, cost)
			if d.Limit != alg.Max() {
				t.Fatalf("step %d: limit %d, want %d", i, d.Limit, alg.Max())
			}
			if cost > alg.Max() {
				if err == nil || !d.RetryNever() || d.Allowed {
					t.Fatalf("step %d: cost %d > max %d: got %+v, %v", i, cost, alg.Max(), d, err)
				}
			} else if err != nil {
				t.Fatalf("step %d: cost %d within max %d: %v", i, cost, alg.Max(), err)
			}
			if d.Remaining < 0 || d.Remaining > d.Limit {
				t.Fatalf("step %d: remaining %d outside [0, %d]", i, d.Remaining, d.Limit)
			}
			if tb, ok := alg.(TokenBucket); ok {
				if tok := tb.Tokens(&s, now); tok < 0 || tok > tb.Capacity {
					t.Fatalf("step %d: tokens %d outside [0, %d]", i, tok, tb.Capacity)
				}
			}
			if d.Allowed != (d.RetryAfter == 0) {
				t.Fatalf("step %d: allowed %v with RetryAfter %v", i, d.Allowed, d.RetryAfter)
			}
			if d.Allowed || (isLog && err == nil) || (chargeDenied && cost <= fw.Limit) {
				eff = max(eff, now)
			}
			// The sliding log decides on its own clock, which stands at
			// the latest time it saw: its durations count from there.
			base := now
			if isLog {
				base = eff
			}
			// What the decision took: an admission (or a counted refusal)
			// its cost, a refusal nothing.
			switch want := probeBefore.Remaining; {
			case err != nil && !chargeDenied:
			case d.Allowed || chargeDenied:
				if want = max(0, want-cost); d.Remaining != want {
					t.Fatalf("step %d: %T took %d: remaining %d -> %d, want %d", i, alg, cost, probeBefore.Remaining, d.Remaining, want)
				}
			default:
				after := cloneState(s)
				if probeAfter, _ := alg.AllowAt(&after, now, 0); probeAfter.Remaining != want || d.Remaining != want {
					t.Fatalf("step %d: refusal changed remaining %d -> %d (reported %d)", i, want, probeAfter.Remaining, d.Remaining)
				}
			}
			if err == nil {
				checkRemaining(t, i, alg, &s, now, d.Remaining)
				checkReset(t, i, alg, &s, base, d.ResetAfter)
			}
			if d.Allowed {
				log = append(log, admitted{eff, cost})
			} else if d.RetryAfter > 0 {
				// RetryAfter is exact and rounded up, on every refusal:
				// from the state the refusal left, the same cost is
				// admitted at RetryAfter and refused one ns earlier.
				at := cloneState(s)
				if dd, _ := alg.AllowAt(&at, base+int64(d.RetryAfter), cost); !dd.Allowed {
					t.Fatalf("step %d: %T refused again at now+RetryAfter (%v)", i, alg, d.RetryAfter)
				}
				early := cloneState(s)
				if dd, _ := alg.AllowAt(&early, base+int64(d.RetryAfter)-1, cost); dd.Allowed {
					t.Fatalf("step %d: %T admitted 1ns before RetryAfter (%v)", i, alg, d.RetryAfter)
				}
			}
		}
		checkBound(t, alg, log)
	})
}

// checkRemaining: from s at now, a request of remaining is admitted and
// one of remaining+1 refused (s itself is not changed).
func checkRemaining(t *rapid.T, step int, alg Algorithm, s *State, now, remaining int64) {
	t.Helper()
	fits := cloneState(*s)
	if d, err := alg.AllowAt(&fits, now, remaining); remaining > 0 && !d.Allowed {
		t.Fatalf("step %d: %T reported remaining %d, refused it (%v)", step, alg, remaining, err)
	}
	if remaining < alg.Max() {
		over := cloneState(*s)
		if d, _ := alg.AllowAt(&over, now, remaining+1); d.Allowed {
			t.Fatalf("step %d: %T reported remaining %d, admitted %d", step, alg, remaining, remaining+1)
		}
	}
}

// checkReset: ResetAfter (counted from base) is the first nanosecond s is
// fresh again (a probe sees the whole limit).
func checkReset(t *rapid.T, step int, alg Algorithm, s *State, base int64, reset time.Duration) {
	t.Helper()
	if reset < 0 {
		return // Never: a bucket that does not refill
	}
	at := cloneState(*s)
	if d, _ := alg.AllowAt(&at, base+int64(reset), 0); d.Remaining != alg.Max() {
		t.Fatalf("step %d: %T at ResetAfter %v: remaining %d, want %d", step, alg, reset, d.Remaining, alg.Max())
	}
	if reset > 0 {
		early := cloneState(*s)
		if d, _ := alg.AllowAt(&early, base+int64(reset)-1, 0); d.Remaining == alg.Max() {
			t.Fatalf("step %d: %T fresh 1ns before ResetAfter %v", step, alg, reset)
		}
	}
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

// TestPropertyGCRAEqualsTokenBucket pins what the GCRA doc promises: with
// a clock that does not go back, it answers exactly what a token bucket of
// capacity Burst and the same rate answers, every number of every step.
func TestPropertyGCRAEqualsTokenBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := rapid.Int64Range(1, 20).Draw(t, "burst")
		r := Rate{rapid.Int64Range(1, 20).Draw(t, "tokens"), time.Duration(rapid.Int64Range(1, 3e9).Draw(t, "period"))}
		g, tb := GCRA{c, r}, TokenBucket{c, r}
		var s1, s2 State
		now := t0
		for i := range rapid.IntRange(1, 40).Draw(t, "n") {
			now += rapid.Int64Range(0, 1e9).Draw(t, "dt")
			cost := rapid.Int64Range(0, c).Draw(t, "cost")
			d1, _ := g.AllowAt(&s1, now, cost)
			d2, _ := tb.AllowAt(&s2, now, cost)
			if d1 != d2 {
				t.Fatalf("step %d: gcra %+v, token bucket %+v", i, d1, d2)
			}
		}
	})
}
