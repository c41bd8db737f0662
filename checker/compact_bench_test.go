package checker

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// compactRules: a per-IP rule whose windows outlast the benchmark, so
// every key decided stays held.
const compactRules = `domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// spendingChecker returns a checker on cs (over ms, which keeps the
// registry) and a test clock, joined to the registry long enough ago to
// spend first-touch allowances.
func spendingChecker(tb testing.TB, rules string, cc config.CheckerConfig, ms *counters.MemStore, cs counters.Store,
	prod events.Producer) (*Checker, *clock) {
	tb.Helper()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	c, err := New(Config{CheckerConfig: cc, FlushThreshold: 1 << 30}, ruleStore(tb, rules), cs, prod, clk)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := c.heartbeat(ctx); err != nil {
		tb.Fatal(err)
	}
	clk.ns.Add(c.ft.settle + int64(time.Millisecond))
	if err := c.heartbeat(ctx); err != nil {
		tb.Fatal(err)
	}
	c.ft.started.Store(true)
	return c, clk
}

// rssBytes is this process's resident memory.
func rssBytes(tb testing.TB) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status:", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Skip("no VmRSS in /proc/self/status")
	return 0
}

// BenchmarkCompactKeyBytes (issue 22, compact keys): 1,000,000 per-IP
// keys each decided once on its first-touch allowance, emitted as the
// flusher would every 10,000 decisions: the heap after a GC and the
// resident memory the process grew by, per key (target ≤ 256 bytes of
// resident memory). BenchmarkKeyTableBytes is the same keys as entries.
// -benchtime 1x is enough.
func BenchmarkCompactKeyBytes(b *testing.B) {
	const keys = 1_000_000
	for b.Loop() {
		ms := counters.NewMemStore()
		c, clk := spendingChecker(b, compactRules, config.CheckerConfig{MaxKeys: 2 * keys}, ms, ms, nullProducer{})
		ctx := context.Background()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rss := rssBytes(b)
		var d ratelimit.Decision
		r := req(1, "remote_address", "")
		for i := range keys {
			r.Descriptors[0].Entries[0].Value = "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
			clk.ns.Add(int64(time.Microsecond))
			if err := c.Check(ctx, r, &d); err != nil || !d.Allowed() {
				b.Fatalf("key %d: %v %v", i, err, d.Code)
			}
			if i%10000 == 9999 {
				if err := c.flush(ctx, false); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := c.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		grown := rssBytes(b) - rss
		if s := c.Snapshot(); s.CompactKeys != keys || s.Keys != 0 {
			b.Fatalf("%d compact keys and %d entries, want %d and none", s.CompactKeys, s.Keys, keys)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "heap-bytes/key")
		b.ReportMetric(float64(grown)/keys, "rss-bytes/key")
		runtime.KeepAlive(c)
	}
}

// BenchmarkCheckCompactKeys: decisions on 65,536 keys held as compact
// records, each well within its allowance (the path a per-IP front's
// first hits take): no entry, no store call, no allocation once every
// key's emission of the interval exists.
func BenchmarkCheckCompactKeys(b *testing.B) {
	const keys = 1 << 16
	ms := counters.NewMemStore()
	c, clk := spendingChecker(b, compactRules, config.CheckerConfig{}, ms, ms, nullProducer{})
	reqs := make([]*ratelimit.Request, keys)
	for i := range reqs {
		reqs[i] = req(1, "remote_address", "10.1."+strconv.Itoa(i>>8)+"."+strconv.Itoa(i&255))
	}
	ctx := context.Background()
	var d ratelimit.Decision
	for _, r := range reqs {
		c.Check(ctx, r, &d)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		clk.ns.Add(1)
		c.Check(ctx, reqs[i&(keys-1)], &d)
		sinkAllowed = d.Code == ratelimit.OK
		i++
	}
	b.StopTimer()
	if s := c.Snapshot(); s.Keys > 0 && i < 200*keys {
		b.Fatalf("%d keys became entries within their allowance", s.Keys)
	}
}
