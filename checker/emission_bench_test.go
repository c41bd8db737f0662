package checker

import (
	"context"
	"github.com/velvetrope/velvetrope/config"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const emissionRules = `domain: api
descriptors:
  - key: user_id
    algorithm: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// heldHits is what the table holds that the store lacks (requires no
// lock held): the hits decided in memory and not yet handed to the
// producer, in all and the most of one key — what a kill -9 would lose
// beside what the producer had not acknowledged.
func (c *Checker) heldHits() (all, most int64) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, e := range sh.keys {
			for ; e != nil; e = e.next {
				n := int64(e.pend.Counted)
				all += n
				most = max(most, n)
			}
		}
		for _, d := range sh.orphans {
			all += int64(d.CountedCost)
		}
		sh.mu.Unlock()
	}
	return all, most
}

// BenchmarkEmissionAtThousandKeys: 1,000 keys far from their limits at
// Zipf-distributed rates (20,000 decisions a second in all: the hottest
// key ~2,700 a second, half the keys under 8), 10 s of simulated time on
// an injected clock, flushes every FlushInterval and refresher passes
// every RefreshTick as in a running checker. It reports deltas per
// decision — what emission in proportion to need saves — and the most
// hits held at once, in all and by one key: what a checker killed then
// would lose (besides what the producer had not acknowledged). Run with
// -benchtime 1x. every-flush is the same run with every key emitted at
// every flush (MaxEmitInterval = FlushInterval): what the saving is
// measured against.
func BenchmarkEmissionAtThousandKeys(b *testing.B) {
	const keys = 1000
	var weight [keys]float64
	var sum float64
	for i := range weight {
		weight[i] = 1 / math.Pow(float64(i+1), 1.1)
		sum += weight[i]
	}
	reqs := make([]*ratelimit.Request, keys)
	for i := range reqs {
		reqs[i] = req(1, "user_id", "u"+strconv.Itoa(i))
	}
	for _, v := range []struct {
		name string
		cfg  Config
	}{
		{"default", Config{}},
		{"uncapped", Config{CheckerConfig: config.CheckerConfig{MaxHeldHits: 1 << 40, MaxHeldTotal: 1 << 50}}}, // held up to MaxEmitInterval, as before the caps
		{"held-128-16k", Config{CheckerConfig: config.CheckerConfig{MaxHeldHits: 128, MaxHeldTotal: 16384}}},
		{"held-64-8k", Config{CheckerConfig: config.CheckerConfig{MaxHeldHits: 64, MaxHeldTotal: 8192}}},
		{"every-flush", Config{CheckerConfig: config.CheckerConfig{MaxEmitInterval: 50 * time.Millisecond}}}, // no emission in proportion to need
	} {
		b.Run(v.name, func(b *testing.B) { emissionRun(b, v.cfg, reqs, weight[:], sum) })
	}
}

func emissionRun(b *testing.B, cfg Config, reqs []*ratelimit.Request, weight []float64, sum float64) {
	const keys, perSecond, seconds = 1000, 20000, 10
	for b.Loop() {
		ms := counters.NewMemStore()
		clk := &clock{}
		clk.ns.Store(t0)
		ms.SetClock(clk)
		prod := &applyProducer{store: ms}
		c, err := New(cfg, ruleStore(b, emissionRules), ms, prod, clk)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		var acc [keys]float64
		var decisions int64
		var heldAll, heldOne int64
		step := time.Millisecond
		var d ratelimit.Decision
		for t := time.Duration(0); t < seconds*time.Second; t += step {
			clk.ns.Add(int64(step))
			for i := range acc {
				acc[i] += perSecond * weight[i] / sum * step.Seconds()
				for ; acc[i] >= 1; acc[i]-- {
					if err := c.Check(ctx, reqs[i], &d); err != nil || !d.Allowed() {
						b.Fatalf("key %d refused far from its limit: %v %v", i, err, d.Code)
					}
					decisions++
				}
			}
			if t%c.cfg.RefreshTick == 0 {
				c.Refresh(ctx)
			}
			if t%c.cfg.FlushInterval == 0 {
				all, most := c.heldHits()
				heldAll, heldOne = max(heldAll, all), max(heldOne, most)
				if err := c.flush(ctx, false); err != nil {
					b.Fatal(err)
				}
			}
		}
		s := c.Snapshot()
		b.ReportMetric(float64(s.DeltasEmitted)/float64(decisions), "deltas/decision")
		b.ReportMetric(float64(heldAll), "held-hits-max")
		b.ReportMetric(float64(heldOne), "held-hits-key-max")
		b.ReportMetric(float64(decisions)/seconds, "decisions/s")
	}
}
