package checker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// compactTestRules: a window rule whose allowance is 10 (1 % of 1,000), a
// value Envoy's way blocks, and a bucket (no allowance).
const compactTestRules = `domain: api
descriptors:
  - key: ip
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: envoy_ip
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: bucket
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

func compactChecker(t *testing.T) (*Checker, *clock, *applyProducer, *chargeRecorder) {
	t.Helper()
	ms := counters.NewMemStore()
	p, cs := &applyProducer{store: ms}, &chargeRecorder{MemStore: ms}
	c, clk := spendingChecker(t, compactTestRules, config.CheckerConfig{}, ms, cs, p)
	return c, clk, p, cs
}

// chargeRecorder keeps the last charge a checker made.
type chargeRecorder struct {
	*counters.MemStore
	charges int
	last    counters.ChargeRequest
}

func (s *chargeRecorder) Do(ctx context.Context, ops []*counters.Op) {
	for _, op := range ops {
		if !op.Sync {
			s.charges++
			s.last = op.Charge
		}
	}
	s.MemStore.Do(ctx, ops)
}

func ruleOf(c *Checker, id string) *config.Rule { return c.rules.Load().RuleByID(id) }

// TestCompactKeysDecideWithoutAnEntry: a key's first hits take a compact
// record and no entry or store call; they leave at the next flush as a
// delta that counts them, with own_after and the minute's usage.
func TestCompactKeysDecideWithoutAnEntry(t *testing.T) {
	c, clk, p, _ := compactChecker(t)
	ctx := context.Background()
	for i := range 3 {
		var d ratelimit.Decision
		if err := c.Check(ctx, req(2, "ip", "10.0.0.1"), &d); err != nil || !d.Allowed() {
			t.Fatalf("decision %d: %v %v", i, err, d.Code)
		}
		if want := int64(1000 - 2*(i+1)); d.Statuses[0].Remaining != want {
			t.Fatalf("decision %d: remaining %d, want %d", i, d.Statuses[0].Remaining, want)
		}
		if d.Statuses[0].ResetAfter <= 0 || d.Statuses[0].ResetAfter > time.Minute {
			t.Fatalf("decision %d: reset after %v", i, d.Statuses[0].ResetAfter)
		}
		clk.ns.Add(int64(time.Millisecond))
	}
	s := c.Snapshot()
	if s.Keys != 0 || s.CompactKeys != 1 || s.SyncCharges != 0 || s.FirstTouch != 3 {
		t.Fatalf("snapshot %+v: want 1 compact key, no entry, no charge, 3 first-touch decisions", s)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := c.Counter(ruleOf(c, "api:ip"), req(1, "ip", "10.0.0.1").Descriptors[0].Entries, clk.Now())
	if err != nil || !v.Held || v.Used != 6 || v.Remaining != 994 {
		t.Fatalf("operator view %+v %v: want held, 6 used, 994 remaining", v, err)
	}
	// seen again after its decisions left: an active key, now an entry
	// that holds the record's hits (its own first-touch allowance: 10)
	var d ratelimit.Decision
	if err := c.Check(ctx, req(2, "ip", "10.0.0.1"), &d); err != nil || !d.Allowed() || d.Statuses[0].Remaining != 992 {
		t.Fatalf("after the flush: %v %v %+v", err, d.Code, d.Statuses)
	}
	if s := c.Snapshot(); s.Keys != 1 || s.CompactKeys != 0 || s.FirstTouch != 4 || s.SyncCharges != 0 {
		t.Fatalf("after the flush: %+v; want the key an entry, decided from memory", s)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(p.all) != 2 {
		t.Fatalf("%d deltas, want the record's and the entry's", len(p.all))
	}
	for i, want := range []struct{ counted, own, count uint64 }{{6, 6, 3}, {2, 8, 1}} {
		d := p.all[i]
		if d.CounterKey != string(config.AppendCounterKey(nil, ruleOf(c, "api:ip"), req(1, "ip", "10.0.0.1").Descriptors[0].Entries)) ||
			d.DescriptorText != "ip=10.0.0.1" || d.RuleId != "api:ip" || d.Algorithm != "fixed_window" {
			t.Fatalf("delta %d names %q %q %q %q", i, d.CounterKey, d.DescriptorText, d.RuleId, d.Algorithm)
		}
		if d.CountedCost != want.counted || d.OwnAfter != want.own || d.AllowedCount != want.count || d.AlreadyApplied {
			t.Fatalf("delta %d: counted %d own_after %d allowed %d applied %v; want %+v", i, d.CountedCost, d.OwnAfter,
				d.AllowedCount, d.AlreadyApplied, want)
		}
		if d.WindowStartUnixNanos != limiter.WindowStart(t0, int64(time.Minute)) || d.Minute == nil || d.Minute.AllowedCost != want.counted {
			t.Fatalf("delta %d: window %d minute %+v", i, d.WindowStartUnixNanos, d.Minute)
		}
	}
	if p.all[0].Minute.Stream == p.all[1].Minute.Stream {
		t.Fatal("the record's and the entry's deltas share an analytics stream: the second row would replace the first")
	}
}

// TestCompactKeyBecomesAnEntry: past its allowance a key gets an entry
// that takes what the record spent, and its charge tells the store.
func TestCompactKeyBecomesAnEntry(t *testing.T) {
	c, _, _, cs := compactChecker(t)
	ctx := context.Background()
	var d ratelimit.Decision
	for range 10 {
		if err := c.Check(ctx, req(1, "ip", "10.0.0.2"), &d); err != nil || !d.Allowed() {
			t.Fatalf("%v %v", err, d.Code)
		}
	}
	if s := c.Snapshot(); s.Keys != 0 || s.CompactKeys != 1 {
		t.Fatalf("after the allowance: %+v", s)
	}
	if err := c.Check(ctx, req(1, "ip", "10.0.0.2"), &d); err != nil || !d.Allowed() {
		t.Fatalf("%v %v", err, d.Code)
	}
	s := c.Snapshot()
	if s.Keys != 1 || s.CompactKeys != 0 || cs.charges != 1 {
		t.Fatalf("past the allowance: %+v; want an entry, no record, one charge", s)
	}
	if got := cs.last.OwnEmitted; got != 10 {
		t.Fatalf("the charge reported %d own memory hits, want the record's 10", got)
	}
}

// TestCompactRefusedRequestGivesBack: a request another descriptor
// refuses spends nothing of the allowance and counts as refused; Envoy's
// semantics counts its hits all the same.
func TestCompactRefusedRequestGivesBack(t *testing.T) {
	for _, tc := range []struct {
		key     string
		counted uint64
	}{{"ip", 0}, {"envoy_ip", 3}} {
		t.Run(tc.key, func(t *testing.T) {
			c, _, p, _ := compactChecker(t)
			ctx := context.Background()
			var d ratelimit.Decision
			if err := c.Check(ctx, req(3, tc.key, "10.0.0.3", "blocked", "x"), &d); err != nil || d.Allowed() {
				t.Fatalf("%v %v: want refused", err, d.Code)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var mine *eventsv1.Delta
			for _, x := range p.all {
				if x.DescriptorText == tc.key+"=10.0.0.3" {
					mine = x
				}
			}
			if mine == nil || mine.CountedCost != tc.counted || mine.DeniedCount+mine.AllowedCount != 1 {
				t.Fatalf("delta %+v: want one decision, %d counted", mine, tc.counted)
			}
			r := ruleOf(c, "api:"+tc.key)
			v, _ := c.Counter(r, req(1, tc.key, "10.0.0.3").Descriptors[0].Entries, c.Now())
			if v.Used != int64(tc.counted) {
				t.Fatalf("the record holds %d spent, want %d", v.Used, tc.counted)
			}
		})
	}
}

// TestCompactNotWhereNoAllowance: buckets, a checker that has not
// settled in the registry, and keys an evicted entry may have spent on
// get entries as before.
func TestCompactNotWhereNoAllowance(t *testing.T) {
	ctx := context.Background()
	c, clk, _, _ := compactChecker(t)
	var d ratelimit.Decision
	if err := c.Check(ctx, req(1, "bucket", "b"), &d); err != nil || !d.Allowed() {
		t.Fatalf("%v %v", err, d.Code)
	}
	if s := c.Snapshot(); s.CompactKeys != 0 || s.Keys != 1 {
		t.Fatalf("a bucket: %+v", s)
	}
	// a horizon over the hash: its window may hold an evicted entry's hits
	rule := ruleOf(c, "api:ip")
	es := req(1, "ip", "h").Descriptors[0].Entries
	c.ft.horizon[c.counterHash(rule, es)>>52].Store(clk.Now() + int64(time.Hour))
	if err := c.Check(ctx, req(1, "ip", "h"), &d); err != nil || !d.Allowed() {
		t.Fatalf("%v %v", err, d.Code)
	}
	if s := c.Snapshot(); s.CompactKeys != 0 || s.Keys != 2 {
		t.Fatalf("under a horizon: %+v", s)
	}
	fresh, err := New(Config{}, ruleStore(t, compactTestRules), counters.NewMemStore(), nullProducer{}, clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Check(ctx, req(1, "ip", "n"), &d); err != nil || !d.Allowed() {
		t.Fatalf("%v %v", err, d.Code)
	}
	if s := fresh.Snapshot(); s.CompactKeys != 0 {
		t.Fatalf("a checker not in the registry spent an allowance: %+v", s)
	}
}

// TestCompactClockBehindKeepsTheLaterWindow: a request whose clock is
// behind a record's window (two requests at a boundary take the lock out
// of their clocks' order; a clamped clock may step back) must not start
// that window's allowance over: the window admits its allowance from
// memory once, then charges.
func TestCompactClockBehindKeepsTheLaterWindow(t *testing.T) {
	c, clk, p, cs := compactChecker(t)
	ctx := context.Background()
	W := int64(time.Minute)
	w2 := limiter.WindowStart(clk.Now(), W) + W
	clk.ns.Store(w2 + int64(time.Millisecond))
	if err := c.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	var d ratelimit.Decision
	fromMemory := 0
	for flip := range 5 {
		for range 10 {
			clk.ns.Store(w2 + int64(time.Millisecond) + int64(flip))
			charges := cs.charges
			if err := c.Check(ctx, req(1, "ip", "x"), &d); err != nil || !d.Allowed() {
				t.Fatalf("%v %v", err, d.Code)
			}
			if cs.charges == charges {
				fromMemory++
			}
		}
		clk.ns.Store(w2 - int64(time.Millisecond)) // one request of the window before
		if err := c.Check(ctx, req(1, "ip", "x"), &d); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if fromMemory > 10 {
		t.Fatalf("the later window admitted %d hits from memory on an allowance of 10", fromMemory)
	}
	var counted uint64
	for _, x := range p.all {
		if x.WindowStartUnixNanos == w2 && !x.AlreadyApplied {
			counted += x.CountedCost
		}
	}
	if counted > 10 {
		t.Fatalf("deltas carry %d hits of the later window decided from memory, allowance 10", counted)
	}
}

// TestCompactEnvoyRefusedReportsItsCount: Envoy's semantics keeps a
// refused request's hits, and its status says so.
func TestCompactEnvoyRefusedReportsItsCount(t *testing.T) {
	c, _, _, _ := compactChecker(t)
	ctx := context.Background()
	var d ratelimit.Decision
	if err := c.Check(ctx, req(3, "envoy_ip", "Z", "blocked", "x"), &d); err != nil || d.Allowed() {
		t.Fatalf("%v %v", err, d.Code)
	}
	v, _ := c.Counter(ruleOf(c, "api:envoy_ip"), req(1, "envoy_ip", "Z").Descriptors[0].Entries, c.Now())
	if d.Statuses[0].Remaining != 997 || v.Remaining != 997 {
		t.Fatalf("answered remaining %d, the counter holds %d remaining: want 997 for both", d.Statuses[0].Remaining, v.Remaining)
	}
}

// gateStore holds the first charge of a key containing gate until
// released, so other decisions run while a request waits on it.
type gateStore struct {
	*chargeRecorder
	gate             string
	armed            bool
	entered, release chan struct{}
}

func (g *gateStore) Do(ctx context.Context, ops []*counters.Op) {
	for _, op := range ops {
		if g.armed && strings.Contains(op.Charge.Key, g.gate) {
			g.armed = false
			close(g.entered)
			<-g.release
		}
	}
	g.chargeRecorder.Do(ctx, ops)
}

// TestCompactAdoptedWhileARequestWaits: a request whose compact
// descriptor waits on another descriptor's store charge, while other
// requests make the key an entry, is refused: the store counts exactly
// the hits its callers were admitted, and the entry holds them.
func TestCompactAdoptedWhileARequestWaits(t *testing.T) {
	const rules = `domain: api
descriptors:
  - key: ip
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: small
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	for _, waiting := range []bool{true, false} { // refused, or admitted
		ms := counters.NewMemStore()
		p := &applyProducer{store: ms}
		g := &gateStore{chargeRecorder: &chargeRecorder{MemStore: ms}, gate: "small", entered: make(chan struct{}), release: make(chan struct{})}
		c, clk := spendingChecker(t, rules, config.CheckerConfig{}, ms, g, p)
		ctx := context.Background()
		if waiting {
			other, err := New(Config{FlushThreshold: 1 << 30}, ruleStore(t, rules), ms, p, clk)
			if err != nil {
				t.Fatal(err)
			}
			var d ratelimit.Decision
			for range 5 { // small=k spent by another checker
				other.Check(ctx, req(1, "small", "k"), &d)
			}
			if err := other.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		g.armed = true
		done := make(chan ratelimit.Decision)
		go func() {
			var d ratelimit.Decision
			c.Check(ctx, req(3, "ip", "X", "small", "k"), &d)
			done <- d
		}()
		<-g.entered
		admitted := int64(0)
		for range 8 {
			var d ratelimit.Decision
			if c.Check(ctx, req(1, "ip", "X"), &d); d.Allowed() {
				admitted++
			}
		}
		close(g.release)
		if d := <-done; d.Allowed() == waiting {
			t.Fatalf("waiting %v: the request was answered %v", waiting, d.Code)
		} else if d.Allowed() {
			admitted += 3
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		items := []counters.ReadItem{{Key: "api:ip|ip=X", Kind: counters.KindWindow, Window: limiter.WindowStart(clk.Now(), int64(time.Minute))}}
		if err := ms.Read(ctx, "", items); err != nil {
			t.Fatal(err)
		}
		if items[0].Total != admitted {
			t.Fatalf("refused %v: the store holds %d hits of ip=X, callers were admitted %d", waiting, items[0].Total, admitted)
		}
	}
}

// TestAFlushIsOneProduceCall: a flush hands the producer its deltas in
// one call (the producer packs a call's deltas of one partition into one
// record: a call of 2,048 deltas made a round of compact keys at 30,000
// decisions a second four records per partition).
func TestAFlushIsOneProduceCall(t *testing.T) {
	c, clk, p, _ := compactChecker(t)
	ctx := context.Background()
	const keys = 5000
	for i := range keys {
		var d ratelimit.Decision
		if err := c.Check(ctx, req(1, "ip", fmt.Sprint("10.1.", i/256, ".", i%256)), &d); err != nil || !d.Allowed() {
			t.Fatalf("key %d: %v %v", i, err, d.Code)
		}
	}
	clk.ns.Add(int64(time.Millisecond))
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if p.calls != 1 || len(p.all) != keys {
		t.Fatalf("%d Produce calls of %d deltas, want one call of %d", p.calls, len(p.all), keys)
	}
}
