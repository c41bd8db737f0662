package checker

import (
	"context"
	"github.com/velvetrope/velvetrope/config"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/rates"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const benchRules = `domain: api
descriptors:
  - key: user_id
    algorithm: token_bucket
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// benchChecker returns a checker whose keys are far from their limits,
// reading the real clock (time.Now once per Check, as a request does).
func benchChecker(b *testing.B, maxKeys int) *Checker {
	b.Helper()
	ms := counters.NewMemStore()
	c, err := New(Config{CheckerConfig: config.CheckerConfig{MaxKeys: maxKeys}, FlushThreshold: 1 << 30}, ruleStore(b, benchRules), ms,
		&applyProducer{store: ms}, sysClock{})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

type sysClock struct{}

func (sysClock) Now() int64 { return time.Now().UnixNano() }

// warm takes a key through its first store answers so it sits in the far band.
func warm(b *testing.B, c *Checker, r *ratelimit.Request) {
	b.Helper()
	var d ratelimit.Decision
	for range 3 {
		if err := c.Check(context.Background(), r, &d); err != nil || !d.Allowed() {
			b.Fatalf("warm-up: %v %v", err, d.Code)
		}
		time.Sleep(rates.Span + time.Millisecond) // a benchmark's setup may wait; tests never do
	}
	time.Sleep(youth) // past the young-key period
}

// youth is how long a new key stays in the near band (min refresh +
// pipeline lag, defaults).
const youth = 300 * time.Millisecond

var sinkAllowed bool

// BenchmarkCheckAsync: one key, far from its limit: memory only.
func BenchmarkCheckAsync(b *testing.B) {
	farLoop(b, benchChecker(b, 1<<20), 3)
}

// farLoop warms user_id=priya into the far band and decides it b.N
// times; more than maxCharges store calls fails it (the far band makes
// none after the warm-up's).
func farLoop(b *testing.B, c *Checker, maxCharges uint64) {
	b.Helper()
	r := req(1, "user_id", "priya")
	warm(b, c, r)
	var d ratelimit.Decision
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c.Check(context.Background(), r, &d)
		sinkAllowed = d.Code == ratelimit.OK
	}
	if c.Stats.SyncCharges.Load() > maxCharges {
		b.Fatalf("far band made %d store calls", c.Stats.SyncCharges.Load())
	}
}

// BenchmarkXTimeRateAllow is the reference of the same run: one
// golang.org/x/time/rate limiter, finite rate (rate.Inf short-circuits).
func BenchmarkXTimeRateAllow(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1e9), 1e9)
	b.ReportAllocs()
	for b.Loop() {
		sinkAllowed = l.Allow()
	}
}

// BenchmarkCheckAsyncManyKeys cycles over 1M keys already in the table.
func BenchmarkCheckAsyncManyKeys(b *testing.B) {
	const n = 1 << 20
	c := benchChecker(b, 2*n) // headroom: shards fill unevenly, and eviction is not what this measures
	reqs := make([]*ratelimit.Request, n)
	for i := range reqs {
		reqs[i] = req(1, "user_id", "u"+strconv.Itoa(i))
	}
	var d ratelimit.Decision
	for _, r := range reqs { // create the keys (their first decisions charge the store)
		c.Check(context.Background(), r, &d)
	}
	time.Sleep(rates.Span + time.Millisecond)
	for _, r := range reqs {
		c.Check(context.Background(), r, &d)
	}
	time.Sleep(youth)
	c.Flush(context.Background())
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		c.Check(context.Background(), reqs[i], &d)
		if i++; i == n {
			i = 0
		}
	}
}

// BenchmarkCheckAsyncParallel: every goroutine on its own keys, from a set
// of 1,024.
func BenchmarkCheckAsyncParallel(b *testing.B) {
	c := benchChecker(b, 1<<20)
	reqs := make([]*ratelimit.Request, 1024)
	for i := range reqs {
		reqs[i] = req(1, "user_id", "p"+strconv.Itoa(i))
		warmOne(c, reqs[i])
	}
	time.Sleep(rates.Span + time.Millisecond)
	for _, r := range reqs {
		warmOne(c, r)
	}
	time.Sleep(youth)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		base := int(next.Add(64)) % 1024 // this goroutine's own 64 keys
		var d ratelimit.Decision
		i := 0
		for pb.Next() {
			c.Check(context.Background(), reqs[base+i&63], &d)
			i++
		}
		sinkAllowed = d.Code == ratelimit.OK
	})
}

func warmOne(c *Checker, r *ratelimit.Request) {
	var d ratelimit.Decision
	c.Check(context.Background(), r, &d)
}

// BenchmarkCheckAsyncHotKeyParallel: all goroutines on one key (reported,
// no target: one key is one lock).
func BenchmarkCheckAsyncHotKeyParallel(b *testing.B) {
	c := benchChecker(b, 1<<20)
	r := req(1, "user_id", "hot")
	warm(b, c, r)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var d ratelimit.Decision
		for pb.Next() {
			c.Check(context.Background(), r, &d)
		}
		sinkAllowed = d.Code == ratelimit.OK
	})
}

// nullStore answers every charge as allowed and keeps nothing, so a
// memory measurement sees the key table alone.
type nullStore struct{ counters.Store }

func (*nullStore) Do(_ context.Context, ops []*counters.Op) {
	for _, op := range ops {
		op.Answer = counters.ChargeResult{Allowed: true, Total: op.Charge.Cost, Own: op.Charge.Cost,
			OwnSync: op.Charge.Cost, Instances: 1}
	}
}

// nullProducer drops deltas.
type nullProducer struct{}

func (nullProducer) Produce(context.Context, []*eventsv1.Delta) error { return nil }
func (nullProducer) Close(context.Context) error                      { return nil }

const memoryRules = `domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// BenchmarkKeyTableBytes measures the key table's memory per tracked key
// (heap after a GC, per key): 1,000,000 keys of an Envoy-format per-IP
// rule, each decided once and emitted, as at a front where most keys
// are seen once. -benchtime 1x is enough: it reports bytes/key.
func BenchmarkKeyTableBytes(b *testing.B) {
	const keys = 1_000_000
	for b.Loop() {
		c, err := New(Config{CheckerConfig: config.CheckerConfig{MaxKeys: 2 * keys}, FlushThreshold: 1 << 30}, ruleStore(b, memoryRules), &nullStore{counters.NewMemStore()},
			nullProducer{}, sysClock{})
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var d ratelimit.Decision
		r := req(1, "remote_address", "")
		for i := range keys {
			r.Descriptors[0].Entries[0].Value = "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
			if err := c.Check(context.Background(), r, &d); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := c.Snapshot().Keys; n != keys {
			b.Fatalf("%d keys tracked, want %d", n, keys)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "bytes/key")
		runtime.KeepAlive(c)
	}
}

// BenchmarkLateCharge is a cost after the response on a far key (the
// async counter counts it in memory; nothing calls out): to compare with
// BenchmarkCheckAsync, the decision it follows.
func BenchmarkLateCharge(b *testing.B) {
	c := benchChecker(b, 1<<20)
	r := req(1, "user_id", "priya")
	warm(b, c, r)
	ch := req(1, "user_id", "priya")
	ch.Charge = true
	var d ratelimit.Decision
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Check(context.Background(), ch, &d); err != nil {
			b.Fatal(err)
		}
	}
	if c.Stats.SyncCharges.Load() > 3 {
		b.Fatalf("a charge made %d store calls", c.Stats.SyncCharges.Load())
	}
}
