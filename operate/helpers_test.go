package operate

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) Now() int64 { return c.ns.Load() }

// t0 is aligned to a day, so Envoy windows start at t0.
const t0 = int64(1_700_006_400) * 1e9

// node is a checker and its operator, called as one (their methods do not
// overlap), and the rule store the checker decides with.
type node struct {
	*checker.Checker
	*Operator
	rules *config.Store
}

// newNode starts no loops: the tests sync controls and refresh by hand.
func newNode(t testing.TB, cfg checker.Config, rules *config.Store, ms *counters.MemStore, prod *applyProducer, clk *clock) *node {
	t.Helper()
	c, err := checker.New(cfg, rules, ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	return &node{Checker: c, Operator: New(c, ms), rules: rules}
}

// ruleStore is the rule store of a rule file's text.
func ruleStore(t testing.TB, src string) *config.Store { return testrules.Store(t, src) }

// applyProducer hands every delta straight to a counters.MemStore, as an
// aggregator with no lag would.
type applyProducer struct {
	mu    sync.Mutex
	store *counters.MemStore
	hold  bool // keep deltas instead of applying (pipeline lag)
	held  []*eventsv1.Delta
}

func (p *applyProducer) Produce(_ context.Context, ds []*eventsv1.Delta) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold {
		p.held = append(p.held, ds...)
		return nil
	}
	for _, d := range ds {
		p.store.Apply(0, d)
	}
	return nil
}

func (p *applyProducer) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.held {
		p.store.Apply(0, d)
	}
	p.held = nil
}

func (p *applyProducer) Close(context.Context) error { return nil }

func req(hits int64, kv ...string) *ratelimit.Request {
	r := &ratelimit.Request{Domain: "api", Hits: hits}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, ratelimit.Descriptor{Entries: []config.Entry{{Key: kv[i], Value: kv[i+1]}}})
	}
	return r
}

func codes(d ratelimit.Decision) string {
	s := d.Code.String() + ":"
	for _, st := range d.Statuses {
		s += " " + st.Code.String()
	}
	return s
}

// run sends n requests of one hit and returns their codes.
func run(t *testing.T, c *node, n int, kv ...string) string {
	t.Helper()
	var out []string
	for range n {
		var d ratelimit.Decision
		if err := c.Check(context.Background(), req(1, kv...), &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Code.String())
	}
	return strings.Join(out, " ")
}
