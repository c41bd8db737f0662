package deferred

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestHashedValuesStayHashed: over a hash_values rule that defers, the
// item on the topic carries the hashed value (as the counters hold it),
// never the raw one; the drain releases it on the same counter — the
// release uses the key's budget, so a live request right after it is
// deferred — and delivers it.
func TestHashedValuesStayHashed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, err := config.ParseRules("r.yaml", []byte(`domain: shop
descriptors:
  - key: email
    hash_values: true
    rate_limit: {unit: second, requests_per_unit: 1}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://t.test"}
`))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := config.Compile([]*config.File{f})
		if err != nil {
			t.Fatal(err)
		}
		rules := config.NewStore(rs)
		ms := counters.NewMemStore()
		ms.SetClock(limiter.SystemClock{})
		bus, _ := events.NewMemBus(1, 100)
		c, err := checker.New(checker.Config{CheckerConfig: config.CheckerConfig{HashKey: "secret"}}, rules, ms, bus, limiter.SystemClock{})
		if err != nil {
			t.Fatal(err)
		}
		topic, _ := events.NewMemBus(2, 100)
		dlq, _ := events.NewMemBus(1, 100)
		q := NewQueue(topic, ms, nil, time.Hour).WithHasher(c)
		check := func() ratelimit.Code {
			req := ratelimit.Request{Domain: "shop", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "email", Value: "ann@example.com"}}}}}
			var d ratelimit.Decision
			if err := c.Check(context.Background(), &req, &d); err != nil {
				t.Fatal(err)
			}
			if d.Code == ratelimit.Deferred {
				if _, err := q.Enqueue(context.Background(), &req, &d, nil); err != nil {
					t.Fatal(err)
				}
			}
			return d.Code
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
		if a, b := check(), check(); a != ratelimit.OK || b != ratelimit.Deferred {
			t.Fatalf("first %v, second %v", a, b)
		}
		m, err := topic.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(m.Value, []byte("ann@example.com")) || bytes.Contains(m.Key, []byte("ann@example.com")) {
			t.Fatalf("the raw value left the checker: %s %s", m.Key, m.Value)
		}
		it, err := Decode(m.Value)
		if err != nil || !it.Hashed || it.Descriptors[0].Rule != "shop:email" {
			t.Fatalf("item %+v %v", it, err)
		}
		topic.Rewind()
		tg := &target{}
		d, err := NewDrain(DrainConfig{Consumer: topic, DeadLetters: dlq, Checker: c, Rules: rules.Load, Tickets: ms,
			Client: &http.Client{Transport: tg}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = d.Run(ctx); close(done) }()
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 500*time.Millisecond)))
		synctest.Wait()
		if got := tg.list(); len(got) != 1 || got[0].key != it.Ticket {
			t.Fatalf("deliveries %+v", got)
		}
		// the release took this second's budget of the same (hashed) counter
		if code := check(); code != ratelimit.Deferred {
			t.Fatalf("a live request after the release: %v, want deferred", code)
		}
		cancel()
		<-done
		if dlq.Pending() != 0 {
			t.Fatal("dead letters")
		}
	})
}
