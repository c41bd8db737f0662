package counters

import (
	"context"
	"testing"
	"time"
)

type stepClock struct{ ns int64 }

func (c *stepClock) Now() int64 { return c.ns }

// TestRegistryCountsLiveInstances: heartbeats list instances for their
// ttl; an instance that stops beating leaves the count; the answer
// carries the store's clock.
func TestRegistryCountsLiveInstances(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{ns: w0}
	ms := NewMemStore()
	ms.SetClock(clk)
	steps := []struct {
		advance  time.Duration
		instance string
		live     int
	}{
		{0, "a/1", 1},
		{100 * time.Millisecond, "b/1", 2},
		{100 * time.Millisecond, "a/1", 2},
		{2500 * time.Millisecond, "a/1", 1}, // b's 2 s ttl passed
		{0, "c/1", 2},
	}
	for i, s := range steps {
		clk.ns += int64(s.advance)
		b, err := ms.Heartbeat(ctx, s.instance, 2*time.Second)
		if err != nil || b.Live != s.live || b.Now != clk.ns {
			t.Fatalf("step %d: %+v %v, want %d live at %d", i, b, err, s.live, clk.ns)
		}
	}
}

// TestRedisRegistry: the same on real Redis (standalone and cluster), on
// the server's clock.
func TestRedisRegistry(t *testing.T) {
	for name, s := range stores(t) {
		rs, ok := s.(redisStore)
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if b, err := rs.Heartbeat(ctx, "a/1", time.Minute); err != nil || b.Live != 1 {
				t.Fatalf("first: %+v %v", b, err)
			}
			b, err := rs.Heartbeat(ctx, "b/1", 50*time.Millisecond)
			if err != nil || b.Live != 2 || time.Since(time.Unix(0, b.Now)).Abs() > 5*time.Second {
				t.Fatalf("second: %+v %v (the server's clock against ours: %v)", b, err, time.Since(time.Unix(0, b.Now)))
			}
			time.Sleep(100 * time.Millisecond) // integration test: b's ttl passes on the server's clock
			if b, err := rs.Heartbeat(ctx, "a/1", time.Minute); err != nil || b.Live != 1 {
				t.Fatalf("after b's ttl: %+v %v", b, err)
			}
		})
	}
}
