// Package testrules builds what tests of the API layers need over and
// over: rules compiled from YAML, an injected clock, and the exact
// in-process checker over both.
package testrules

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
)

// T0 is aligned to a day (and so to every shorter unit), as Envoy's
// windows are aligned to the unit.
const T0 = int64(1_700_006_400) * 1e9

// Clock is a settable clock; it starts at T0.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock at T0.
func NewClock() *Clock {
	c := &Clock{}
	c.ns.Store(T0)
	return c
}

// Now implements limiter.Clock.
func (c *Clock) Now() int64 { return c.ns.Load() }

// Set moves the clock to t0 + d.
func (c *Clock) Set(d time.Duration) { c.ns.Store(T0 + int64(d)) }

// Store compiles one rule file's YAML into a live rule store.
func Store(t testing.TB, yaml string) *config.Store {
	t.Helper()
	f, err := config.ParseRules("rules.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	return config.NewStore(rs)
}

// Local is the exact in-process checker over rules, on clk, remembering
// request ids for idemTTL.
func Local(t testing.TB, rules *config.Store, clk *Clock, idemTTL time.Duration) *local.Engine {
	t.Helper()
	k, err := limiter.NewKeyed(limiter.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.New(rules, k, clk, idemTTL)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
