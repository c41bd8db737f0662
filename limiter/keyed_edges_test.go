package limiter

import (
	"testing"
	"time"
)

// TestKeyedIdempotencyTTLEdge: a request id is remembered for exactly
// its TTL: its retry one ns before is answered from memory and charges
// nothing; at the TTL it is a new request.
func TestKeyedIdempotencyTTLEdge(t *testing.T) {
	k, _ := NewKeyed(WithIdempotency(time.Second, 100))
	alg := TokenBucket{Capacity: 3, Refill: Rate{0, time.Second}} // no refill: every charge shows
	steps := []struct {
		at  int64
		rem int64
	}{
		{0, 2},
		{1e9 - 1, 2}, // the retry within the TTL: the first answer
		{1e9, 1},     // the TTL is over: charged again
	}
	for i, st := range steps {
		d, err := k.AllowAt("a", alg, t0+st.at, 1, "req-1")
		if err != nil || !d.Allowed || d.Remaining != st.rem {
			t.Fatalf("step %d (at %d): %+v %v, want remaining %d", i, st.at, d, err, st.rem)
		}
	}
}

// TestRefundAcrossTheWindowRoll: a refund after the window rolled (and
// nothing charged since) takes the hits out of the window they were
// counted in — a sliding window's previous one, whose weight then falls —
// and gives the new window nothing.
func TestRefundAcrossTheWindowRoll(t *testing.T) {
	cases := []struct {
		name string
		alg  Algorithm
		want int64 // remaining at 1.5 s after refunding the 4 taken at 0.9 s
	}{
		{"sliding window", SlidingWindow{Limit: 10, Window: time.Second}, 10}, // not 8: the 4 weighed 2
		{"fixed window", FixedWindow{Limit: 10, Window: time.Second}, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, _ := NewKeyed()
			if d, _ := k.AllowAt("a", c.alg, w0+9e8, 4, ""); !d.Allowed {
				t.Fatal("charge refused")
			}
			if err := k.RefundAt("a", c.alg, w0+15e8, 4); err != nil {
				t.Fatal(err)
			}
			if d, _ := k.PeekAt("a", c.alg, w0+15e8, 0); d.Remaining != c.want {
				t.Fatalf("remaining %d after the refund, want %d", d.Remaining, c.want)
			}
		})
	}
}

// TestGCRAParameterChangeRoundsUp: a GCRA key changing rate keeps the
// tokens it owes rounded up: 9.5 outstanding are 10 under the new rate,
// never 9 (a free token). (Probes of cost 0 commit the change; a peek
// would convert the old state again each time.)
func TestGCRAParameterChangeRoundsUp(t *testing.T) {
	k, _ := NewKeyed()
	slow, fast := GCRA{Burst: 10, Rate: PerSecond(1)}, GCRA{Burst: 10, Rate: PerSecond(2)}
	if d, _ := k.AllowAt("a", slow, t0, 10, ""); !d.Allowed {
		t.Fatal("burst refused")
	}
	steps := []struct {
		at  int64
		rem int64
	}{
		{5e8, 0}, // 9.5 owed: 10 at 0.5 s each, 5 s
		{1e9, 1},
		{55e8, 10},
	}
	for i, st := range steps {
		if d, _ := k.AllowAt("a", fast, t0+st.at, 0, ""); d.Remaining != st.rem {
			t.Fatalf("step %d (at %d): remaining %d, want %d", i, st.at, d.Remaining, st.rem)
		}
	}
}
