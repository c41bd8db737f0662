package checker

import (
	"context"
	"github.com/velvetrope/velvetrope/config"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// offsetClock reads another clock plus a fixed offset (a checker whose
// clock runs ahead of the store's).
type offsetClock struct {
	base *clock
	off  int64
}

func (c offsetClock) Now() int64 { return c.base.Now() + c.off }

// TestSkewedClockOpensNoEarlyWindow: a checker whose clock runs 5 s ahead
// of the store's learns the store's time from its heartbeat and decides
// within MaxClockSkew of it: the per-second window it exhausted stays
// exhausted until the store's clock (± the skew) leaves it. Without the
// clamp it would already count in a window 5 s ahead.
func TestSkewedClockOpensNoEarlyWindow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxSkew   time.Duration
		wantEarly bool
	}{{"clamped", 100 * time.Millisecond, false}, {"not clamped", time.Hour, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ms := counters.NewMemStore()
			store := &clock{}
			store.ns.Store(t0 + int64(500*time.Millisecond)) // mid-window on the store's clock
			ms.SetClock(store)
			c, err := New(Config{CheckerConfig: config.CheckerConfig{MaxClockSkew: tc.maxSkew}}, ruleStore(t, asyncRules), ms, &applyProducer{store: ms},
				offsetClock{store, int64(4700 * time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.heartbeat(context.Background()); err != nil {
				t.Fatal(err)
			}
			if live, skew, _ := c.Fleet(); live != 1 || skew != -4700*time.Millisecond {
				t.Fatalf("fleet: %d live, skew %v; want 1 and -4.7s", live, skew)
			}
			if tc.wantEarly {
				// the unclamped checker decides in its own future window
				if got := limiter.WindowStart(c.clock.Now(), int64(time.Second)); got == t0 {
					t.Fatal("the unclamped clock is in the store's window")
				}
				return
			}
			admitted := 0
			for range 30 {
				if d := (&rig{c: c, clk: store}).check(t, 1, "fixed", "k"); d.Allowed() {
					admitted++
				}
			}
			if admitted != 20 {
				t.Fatalf("admitted %d of 20 in the store's window", admitted)
			}
			store.ns.Add(int64(350 * time.Millisecond)) // store t0+850ms: the checker within 100 ms of it
			if d := (&rig{c: c, clk: store}).check(t, 1, "fixed", "k"); d.Allowed() {
				t.Fatalf("a new window opened %v early", time.Duration(t0+int64(time.Second)-store.ns.Load()))
			}
			store.ns.Add(int64(100 * time.Millisecond)) // store t0+950ms: within the skew of the boundary
			store.ns.Add(int64(100 * time.Millisecond)) // store t0+1.05s: the next window
			if d := (&rig{c: c, clk: store}).check(t, 1, "fixed", "k"); !d.Allowed() {
				t.Fatal("the store's next window did not open")
			}
		})
	}
}

// TestSliceNotRecutFromAStalledPipeline: three checkers with near_limit:
// async while the pipeline delivers nothing (an aggregator still joining
// its group). Their cold slices add up to the limit; store answers that do
// not hold what a checker had counted a pipeline lag after its cut must
// not re-cut the slices (each would take a third of the whole limit
// again). Once the pipeline delivers, slices are re-cut from what truly
// remains, and the window's total stays within the limit.
func TestSliceNotRecutFromAStalledPipeline(t *testing.T) {
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	ms.SetClock(clk)
	prod := &applyProducer{store: ms, hold: true}
	rules := ruleStore(t, `domain: api
descriptors:
  - key: k
    algorithm: fixed_window
    near_limit: async
    rate_limit: {unit: minute, requests_per_unit: 300}
`)
	var cs []*Checker
	for _, name := range []string{"a", "b", "c"} {
		c, err := New(Config{InstanceName: name}, rules, ms, prod, clk)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		if err := c.heartbeat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		_ = c.heartbeat(context.Background()) // every one sees three
	}
	admitted := 0
	step := func(n int) {
		for i := range n {
			clk.ns.Add(int64(time.Millisecond))
			var d ratelimit.Decision
			if err := cs[i%3].Check(context.Background(), req(1, "k", "x"), &d); err != nil {
				t.Fatal(err)
			}
			if d.Allowed() {
				admitted++
			}
			if i%25 == 0 {
				for _, c := range cs {
					c.Flush(context.Background())
					c.Refresh(context.Background())
				}
			}
		}
	}
	step(3000) // 3 s of a stalled pipeline: many refreshes, none holding anyone's hits
	if admitted > 300 {
		for _, c := range cs {
			sn := c.Snapshot()
			t.Logf("%s: far %d near %d over %d", c.instance, sn.FarBand, sn.NearBand, sn.OverBand)
		}
		t.Fatalf("with the pipeline stalled three checkers admitted %d of 300", admitted)
	}
	stalled := admitted
	prod.hold = false
	prod.release()
	step(3000)
	if admitted > 300 || admitted < stalled {
		t.Fatalf("after the pipeline caught up: %d admitted in the window (limit 300; %d while stalled)", admitted, stalled)
	}
	t.Logf("admitted %d while the pipeline stalled, %d in the window", stalled, admitted)
}
