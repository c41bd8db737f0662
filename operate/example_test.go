package operate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/operate"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// fixedClock is a clock that stands still: the decisions below do not
// depend on when the example runs.
type fixedClock int64

func (c fixedClock) Now() int64 { return int64(c) }

// An operator denies one user for an hour on a checker over the in-memory
// counter store (what `velvetrope dev` runs), then lifts the deny.
func ExampleOperator_SetControl() {
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
	store.SetClock(clock)
	c, err := checker.New(checker.Config{}, config.NewStore(rs), store, bus, clock)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Stop(ctx)
	op := operate.New(c, store) // the store c was built with: every checker sharing it applies the control
	priya := []config.Entry{{Key: "user_id", Value: "priya"}}
	check := func() ratelimit.Code {
		var d ratelimit.Decision
		if err := c.Check(ctx, &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: priya}}}, &d); err != nil {
			panic(err)
		}
		return d.Code
	}
	ct, err := op.SetControl(ctx, operate.ControlSpec{Domain: "api", Entries: priya, Action: counters.ActionDeny,
		TTL: time.Hour, Reason: "abuse"})
	if err != nil {
		panic(err)
	}
	fmt.Println("under the deny:", check(), len(op.Controls()), "control in force")
	if _, err := op.DeleteControl(ctx, ct.ID); err != nil {
		panic(err)
	}
	fmt.Println("lifted:", check(), len(op.Controls()), "controls in force")
	// Output:
	// under the deny: deny 1 control in force
	// lifted: allow 0 controls in force
}
