package limiter

import (
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// Sinks keep the compiler from dropping the work.
var (
	sinkDecision Decision
	sinkBool     bool
)

// benchAlg is built once so that passing it costs no allocation, as a rule
// compiled once is passed by a real caller.
var benchAlg Algorithm = TokenBucket{Capacity: 1e9, Refill: PerSecond(1e9)}

func newBenchKeyed(b *testing.B) *Keyed {
	b.Helper()
	k, err := NewKeyed()
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// BenchmarkTokenBucketAllow is one key through Keyed, reading time.Now once
// per call like a real request; compare with BenchmarkXTimeRateAllow.
func BenchmarkTokenBucketAllow(b *testing.B) {
	k := newBenchKeyed(b)
	b.ReportAllocs()
	for b.Loop() {
		d, _ := k.AllowAt("user_id=priya", benchAlg, time.Now().UnixNano(), 1, "")
		sinkDecision = d
	}
}

// BenchmarkXTimeRateAllow is the reference: golang.org/x/time/rate on one
// limiter with a finite rate (rate.Inf short-circuits).
func BenchmarkXTimeRateAllow(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1e9), 1e9)
	b.ReportAllocs()
	for b.Loop() {
		sinkBool = l.AllowN(time.Now(), 1)
	}
}

// BenchmarkTokenBucketAllowManyKeys spreads calls over 100k keys.
func BenchmarkTokenBucketAllowManyKeys(b *testing.B) {
	k := newBenchKeyed(b)
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "user_id=" + strconv.Itoa(i)
		k.AllowAt(keys[i], benchAlg, time.Now().UnixNano(), 1, "")
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d, _ := k.AllowAt(keys[i], benchAlg, time.Now().UnixNano(), 1, "")
		sinkDecision = d
		if i++; i == len(keys) {
			i = 0
		}
	}
}

// BenchmarkTokenBucketAllowParallel runs all Ps over 1024 keys.
func BenchmarkTokenBucketAllowParallel(b *testing.B) {
	k := newBenchKeyed(b)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user_id=" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		var d Decision
		for pb.Next() {
			d, _ = k.AllowAt(keys[i&1023], benchAlg, time.Now().UnixNano(), 1, "")
			i++
		}
		sinkDecision = d
	})
}

// BenchmarkXTimeRateAllowParallel is the reference for the parallel case:
// one x/time/rate limiter shared by all Ps.
func BenchmarkXTimeRateAllowParallel(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1e9), 1e9)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var ok bool
		for pb.Next() {
			ok = l.AllowN(time.Now(), 1)
		}
		sinkBool = ok
	})
}

// BenchmarkAlgorithms measures each algorithm's AllowAt on one key through
// Keyed with an advancing fake time.
func BenchmarkAlgorithms(b *testing.B) {
	algs := []struct {
		name string
		alg  Algorithm
	}{
		{"token_bucket", TokenBucket{Capacity: 100, Refill: PerSecond(1e6)}},
		{"gcra", GCRA{Burst: 100, Rate: PerSecond(1e6)}},
		{"leaky_bucket", LeakyBucket{Capacity: 100, Leak: PerSecond(1e6)}},
		{"fixed_window", FixedWindow{Limit: 1e6, Window: time.Second}},
		{"sliding_window", SlidingWindow{Limit: 1e6, Window: time.Second}},
		{"sliding_log", SlidingLog{Limit: 1000, Window: time.Millisecond}},
	}
	for _, a := range algs {
		b.Run(a.name, func(b *testing.B) {
			k := newBenchKeyed(b)
			now := int64(1e18)
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				d, _ := k.AllowAt("k", a.alg, now, 1, "")
				sinkDecision = d
			}
		})
	}
}
