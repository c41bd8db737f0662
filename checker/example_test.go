package checker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// fixedClock is a clock that stands still: the decisions below do not
// depend on when the example runs.
type fixedClock int64

func (c fixedClock) Now() int64 { return int64(c) }

// An async checker over the in-memory counter store and event bus (what
// `velvetrope dev` runs), on a fixed clock: three hits a minute per user.
func ExampleChecker_Check() {
	f, err := config.ParseRules("api.yaml", []byte(`domain: api
descriptors:
  - key: user_id
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 3}
`))
	if err != nil {
		panic(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		panic(err)
	}
	bus, err := events.NewMemBus(1, 1024)
	if err != nil {
		panic(err)
	}
	clock := fixedClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	store := counters.NewMemStore()
	store.SetClock(clock) // the store's clock is the one checkers keep theirs near
	c, err := checker.New(checker.Config{}, config.NewStore(rs), store, bus, clock)
	if err != nil {
		panic(err)
	}
	// Start runs the background loops (emission, refresh, heartbeat); Stop
	// ends them and flushes what is still held.
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Stop(ctx)
	req := &ratelimit.Request{Domain: "api", Hits: 1,
		Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "user_id", Value: "priya"}}}}}
	var d ratelimit.Decision
	for range 4 {
		if err := c.Check(ctx, req, &d); err != nil {
			panic(err)
		}
		st := d.Statuses[0]
		fmt.Printf("%v: remaining %d, retry after %v\n", d.Code, st.Remaining, st.RetryAfter)
	}
	// Output:
	// allow: remaining 2, retry after 0s
	// allow: remaining 1, retry after 0s
	// allow: remaining 0, retry after 0s
	// deny: remaining 0, retry after 1m0s
}
