package checker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// pipe is one instance's way to the store: a queue delivered in order
// (Kafka keeps a key's deltas in order), late by up to the pipeline lag,
// some of them twice (at least once).
type pipe struct {
	mu sync.Mutex
	q  []piped
}

type piped struct {
	d  *eventsv1.Delta
	at int64
}

type pipeProducer struct {
	p   *pipe
	clk *clock
}

func (pp pipeProducer) Produce(_ context.Context, ds []*eventsv1.Delta) error {
	pp.p.mu.Lock()
	defer pp.p.mu.Unlock()
	for _, d := range ds {
		pp.p.q = append(pp.p.q, piped{d, pp.clk.Now()})
	}
	return nil
}

func (pipeProducer) Close(context.Context) error { return nil }

// deliver applies what waited past lag, and a random part of the rest.
func (p *pipe) deliver(ms *counters.MemStore, rnd *rand.Rand, now, lag int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(p.q) && now-p.q[n].at >= lag {
		n++
	}
	if n < len(p.q) && rnd.IntN(2) == 0 {
		n += rnd.IntN(len(p.q) - n + 1)
	}
	for _, x := range p.q[:n] {
		ms.Apply(0, x.d)
		if rnd.IntN(20) == 0 {
			ms.Apply(0, x.d) // a copy: refused by its sequence
		}
	}
	p.q = p.q[n:]
}

// simInstance is one checker of the simulated fleet.
type simInstance struct {
	c        *Checker
	p        *pipe
	nextBeat int64
	leaving  bool // stopped: no decisions or heartbeats, its pipe still drains
}

// truth is what the fleet admitted of one counter: the admissions' times.
type truth struct{ at []int64 }

// TestFirstTouchNeverExceedsTheLimit is the first-touch allowance's
// property (docs/design.md, "First touch from memory"): over random
// interleavings of a fleet's decisions, flushes, refreshes, heartbeats
// (some lost), a pipeline late by up to its lag that delivers copies,
// evictions, restarts, joins and leaves, no window admits more than its
// limit, for every algorithm of the async engine — and the allowance is
// spent (its decisions are counted), so the property is not held by the
// charges alone. Buckets and sliding windows have no allowance; their
// bounds are checked too.
func TestFirstTouchNeverExceedsTheLimit(t *testing.T) {
	algs := []config.Algorithm{config.AlgFixedWindow, config.AlgEnvoy, config.AlgSlidingWindow,
		config.AlgTokenBucket, config.AlgGCRA, config.AlgLeakyBucket}
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for _, alg := range algs {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/%d", algName(alg), seed), func(t *testing.T) {
				firstTouchSim(t, alg, uint64(seed), 10)
			})
		}
	}
}

// TestFirstTouchOffIsTheControl runs the same simulation with no
// allowance: what the property test asserts must not depend on it.
func TestFirstTouchOffIsTheControl(t *testing.T) {
	for seed := range 3 {
		firstTouchSim(t, config.AlgFixedWindow, uint64(100+seed), -1)
	}
}

func algName(a config.Algorithm) string {
	if a == config.AlgEnvoy {
		return "envoy"
	}
	return string(a)
}

const simLimit = 40

func firstTouchSim(t *testing.T, alg config.Algorithm, seed uint64, percent int64) {
	rnd := rand.New(rand.NewPCG(seed, 0x5eed))
	rule := fmt.Sprintf("rate_limit: {unit: second, requests_per_unit: %d}", simLimit)
	if alg.Bucket() {
		rule = fmt.Sprintf("burst: 10\n    rate_limit: {unit: second, requests_per_unit: %d}", simLimit)
	}
	algLine := ""
	if alg != config.AlgEnvoy {
		algLine = "algorithm: " + string(alg)
	}
	rules := ruleStore(t, fmt.Sprintf("domain: api\ndescriptors:\n  - key: k\n    %s\n    %s\n", algLine, rule))
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0 + int64(rnd.IntN(1000))*int64(time.Millisecond))
	ms.SetClock(clk)
	cfg := Config{Shards: 1, CheckerConfig: config.CheckerConfig{MaxKeys: 3, NearFloorPct: 100, FirstTouchPercent: percent}}
	lag := int64(config.DefaultChecker().PipelineLag)
	var fleet []*simInstance
	names := 0
	join := func() {
		p := &pipe{}
		cf := cfg
		cf.InstanceName = fmt.Sprintf("i%d", names)
		names++
		c, err := New(cf, rules, ms, pipeProducer{p, clk}, clk)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.heartbeat(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.ft.started.Store(true)
		fleet = append(fleet, &simInstance{c: c, p: p, nextBeat: clk.Now() + int64(time.Second)})
	}
	live := func() []*simInstance {
		var out []*simInstance
		for _, in := range fleet {
			if !in.leaving {
				out = append(out, in)
			}
		}
		return out
	}
	leave := func() {
		l := live()
		if len(l) <= 1 {
			return
		}
		in := l[rnd.IntN(len(l))]
		if err := in.c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		in.leaving = true
	}
	for range 3 {
		join()
	}
	ctx := context.Background()
	counts := map[string]*truth{}
	var first, decisions int
	steps := 60000
	if raceEnabled {
		steps = 20000 // the race detector runs it 5× slower
	}
	for step := 0; step < steps; step++ {
		clk.ns.Add(int64(rnd.IntN(2500)) * int64(time.Microsecond))
		now := clk.Now()
		for _, in := range fleet {
			if !in.leaving && now >= in.nextBeat {
				in.nextBeat = now + int64(time.Second) - int64(rnd.IntN(100))*int64(time.Millisecond)
				if rnd.IntN(10) > 0 { // one in ten is lost
					_ = in.c.heartbeat(ctx)
				}
			}
		}
		switch op := rnd.IntN(16000); {
		case op < 11000:
			l := live()
			in := l[rnd.IntN(len(l))]
			key := fmt.Sprintf("v%d", rnd.IntN(6))
			cost := int64(1)
			if rnd.IntN(8) == 0 {
				cost = 1 + int64(rnd.IntN(3))
			}
			var d ratelimit.Decision
			if err := in.c.Check(ctx, req(cost, "k", key), &d); err != nil {
				t.Fatal(err)
			}
			decisions++
			if d.Allowed() {
				tr := counts[key]
				if tr == nil {
					tr = &truth{}
					counts[key] = tr
				}
				for range cost {
					tr.at = append(tr.at, now)
				}
				if err := holds(alg, tr.at); err != nil {
					t.Fatalf("step %d, %s on %s: %v", step, key, in.c.instance, err)
				}
			}
		case op < 13400:
			for _, in := range fleet {
				in.p.deliver(ms, rnd, now, lag)
			}
		case op < 14200:
			_ = fleet[rnd.IntN(len(fleet))].c.Flush(ctx)
		case op < 15000:
			fleet[rnd.IntN(len(fleet))].c.Refresh(ctx)
		case op < 15996:
			// the flusher's tick: every instance emits what is due
			for _, in := range live() {
				_ = in.c.flush(ctx, false)
			}
		case op < 15998: // a restart: a graceful stop, a new instance id
			leave()
			join()
		case op < 15999:
			if len(live()) < 5 {
				join()
			}
		default:
			leave()
		}
	}
	for _, in := range fleet {
		first += int(in.c.Snapshot().FirstTouch)
	}
	t.Logf("%d decisions, %d on the first-touch allowance, %d instances in all", decisions, first, len(fleet))
	spends := percent > 0 && (alg == config.AlgFixedWindow || alg == config.AlgEnvoy)
	if spends && first == 0 {
		t.Fatal("no decision spent the allowance: the property says nothing of it")
	}
	if !spends && first > 0 {
		t.Fatalf("%d decisions spent an allowance there is none of", first)
	}
}

// holds checks the limit over the admissions at (ascending times).
func holds(alg config.Algorithm, at []int64) error {
	W := int64(time.Second)
	t := at[len(at)-1]
	switch alg {
	case config.AlgFixedWindow, config.AlgEnvoy:
		ws := limiter.WindowStart(t, W)
		n := 0
		for _, a := range at {
			if a >= ws {
				n++
			}
		}
		if n > simLimit {
			return fmt.Errorf("%d admitted in the window at %d, limit %d", n, ws, simLimit)
		}
	case config.AlgSlidingWindow:
		ws := limiter.WindowStart(t, W)
		var cur, prev int64
		for _, a := range at {
			switch {
			case a >= ws:
				cur++
			case a >= ws-W:
				prev++
			}
		}
		// prev × (W − elapsed) / W + cur ≤ limit, in integers
		if prev*(W-(t-ws))+cur*W > simLimit*W {
			return fmt.Errorf("sliding: %d in the window and %d before (elapsed %v), limit %d", cur, prev,
				time.Duration(t-ws), simLimit)
		}
	default: // a bucket: any span of length d admits at most burst + rate × d (+1 for the span's first)
		for i := range at {
			n := int64(len(at) - i)
			if bound := 10 + simLimit*(t-at[i])/W + 1; n > bound {
				return fmt.Errorf("bucket: %d admitted in %v, bound %d", n, time.Duration(t-at[i]), bound)
			}
		}
	}
	return nil
}
