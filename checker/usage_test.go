package checker

import (
	"context"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestMinuteUsageIsCumulative: every delta carries its stream's usage of
// the minute so far; a new minute starts from zero; the minute never goes
// back; another key has another stream.
func TestMinuteUsageIsCumulative(t *testing.T) {
	ctx := context.Background()
	ms := counters.NewMemStore()
	prod := &applyProducer{store: ms}
	clk := &clock{}
	clk.ns.Store(t0 + int64(58*time.Second))
	ms.SetClock(clk)
	c, err := New(Config{}, ruleStore(t, controlRules), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	step := func(d time.Duration, hits int64, kv ...string) {
		clk.ns.Add(int64(d))
		var dec ratelimit.Decision
		if err := c.Check(ctx, req(hits, kv...), &dec); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step(0, 1, "user", "a")           // minute 0: 1 allowed
	step(time.Second, 1, "user", "a") // minute 0: 2 allowed
	step(time.Second, 2, "user", "a") // 60 s: minute 1, 2 allowed (cost 2)
	step(0, 1, "user", "b")           // another key, another stream
	step(time.Second, 5, "user", "a") // over the limit: denied in minute 1
	want := []struct {
		minute         int64
		allowed, aCost uint64
		denied         uint64
		stream         uint64
	}{
		{t0 / 1e9, 1, 1, 0, 1},
		{t0 / 1e9, 2, 2, 0, 1},
		{t0/1e9 + 60, 1, 2, 0, 1},
		{t0/1e9 + 60, 1, 1, 0, 2},
		{t0/1e9 + 60, 1, 2, 1, 1},
	}
	if len(prod.all) != len(want) {
		t.Fatalf("%d deltas, want %d", len(prod.all), len(want))
	}
	for i, w := range want {
		m := prod.all[i].Minute
		if m == nil || m.MinuteUnix != w.minute || m.AllowedCount != w.allowed || m.AllowedCost != w.aCost ||
			m.DeniedCount != w.denied || m.Stream != w.stream {
			t.Errorf("delta %d: %+v, want %+v", i, m, w)
		}
	}
}
