package checker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestNewValidatesBounds: the checker refuses bounds that would let a
// request make a delta larger than the pipeline carries (the rule is
// config's, LimitsConfig.Validate).
func TestNewValidatesBounds(t *testing.T) {
	if _, err := New(Config{Bounds: config.LimitsConfig{MaxEntries: 16, MaxValueBytes: 8192}}, ruleStore(t, asyncRules), counters.NewMemStore(),
		&applyProducer{store: counters.NewMemStore()}, &clock{}); err == nil || !strings.Contains(err.Error(), "bounds") {
		t.Fatalf("New accepted bounds that make oversized deltas: %v", err)
	}
}

// TestLargestValidRequestMakesDeliverableDeltas: a request at every bound
// (the default bounds, and the largest the checker accepts; entries
// matching a rule as many levels deep), its keys and values made of the
// bytes the encodings escape, so that ids, counter keys and descriptor
// texts are as long as they get, produces deltas that encode within
// events.MaxRecordBytes, so the aggregator and the broker take them.
func TestLargestValidRequestMakesDeliverableDeltas(t *testing.T) {
	widest := config.LimitsConfig{MaxDescriptors: config.MaxDescriptors, MaxEntries: config.MaxEntries, MaxKeyBytes: 128, MaxRequestIDBytes: 128}
	widest.MaxValueBytes = config.MaxDescriptorBytes/widest.MaxEntries - widest.MaxKeyBytes - 2
	for _, b := range []config.LimitsConfig{config.DefaultLimits(), widest} {
		if err := b.Validate(); err != nil {
			t.Fatalf("bounds %+v: %v", b, err)
		}
		var src strings.Builder
		domain := strings.Repeat(":", 200)
		src.WriteString("domain: \"" + domain + "\"\ndescriptors:\n")
		ind := "  "
		keys := make([]string, b.MaxEntries)
		for i := range keys {
			// Half escaped bytes: the rule id (escaped) stays within
			// config.MaxRuleIDBytes at 16 levels.
			keys[i] = strings.Repeat("|", b.MaxKeyBytes/2) + strings.Repeat(string(rune('a'+i)), b.MaxKeyBytes-b.MaxKeyBytes/2)
			src.WriteString(ind + "- key: \"" + keys[i] + "\"\n")
			if i == len(keys)-1 {
				src.WriteString(ind + "  algorithm: fixed_window\n" + ind + "  rate_limit: {unit: minute, requests_per_unit: 1000}\n")
				break
			}
			src.WriteString(ind + "  descriptors:\n")
			ind += "    "
		}
		ms := counters.NewMemStore()
		prod := &applyProducer{store: ms}
		clk := &clock{}
		clk.ns.Store(t0)
		c, err := New(Config{InstanceName: strings.Repeat("i", 200), Bounds: b}, ruleStore(t, src.String()), ms, prod, clk)
		if err != nil {
			t.Fatal(err)
		}
		q := &ratelimit.Request{Domain: domain, Hits: 1}
		for i := range b.MaxDescriptors {
			es := make([]config.Entry, len(keys))
			for j := range es {
				es[j] = config.Entry{Key: keys[j], Value: strings.Repeat(`|,=\`[i%4:i%4+1], b.MaxValueBytes-1) + string(rune('A'+i))}
			}
			q.Descriptors = append(q.Descriptors, ratelimit.Descriptor{Entries: es})
		}
		var d ratelimit.Decision
		if err := c.Check(context.Background(), q, &d); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(prod.all) != b.MaxDescriptors {
			t.Fatalf("bounds %+v: got %d deltas, want %d", b, len(prod.all), b.MaxDescriptors)
		}
		largest := 0
		for i, dl := range prod.all {
			wire, err := events.Encode(dl)
			if err != nil || len(wire) > events.MaxRecordBytes {
				t.Fatalf("bounds %+v: delta %d: %d bytes (bound %d), err %v", b, i, len(wire), events.MaxRecordBytes, err)
			}
			largest = max(largest, len(wire))
		}
		t.Logf("bounds %+v: the largest delta is %d bytes", b, largest)
	}
}

// TestRefreshReachesEveryShard: with more keys due than one refresher pass
// reads, passes used to start at shard 0 every time, so the last shards
// were never refreshed and their idle keys never dropped (the soak's
// checker grew without bound). Now idle keys are dropped in every shard on
// every pass and the passes rotate.
func TestRefreshReachesEveryShard(t *testing.T) {
	r := newRig(t, Config{CheckerConfig: config.CheckerConfig{MaxKeys: 1 << 16}, Shards: 4})
	const idleKeys, activeKeys = 4000, 5 * refreshBatch
	for i := range idleKeys {
		r.check(t, 1, "fixed", fmt.Sprintf("idle-%d", i))
	}
	if err := r.c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.clk.ns.Add(int64(3 * time.Minute)) // past idle_after (2 min)
	// store charges while young and until two answers taught a rate, then
	// a decision from memory: keys in use, which the refresher reads
	for _, dt := range []time.Duration{0, 400 * time.Millisecond, 100 * time.Millisecond} {
		r.clk.ns.Add(int64(dt))
		for i := range activeKeys {
			r.check(t, 1, "huge", fmt.Sprintf("active-%d", i))
		}
	}
	if err := r.c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.clk.ns.Add(int64(6 * time.Second)) // every key due (max_refresh 5 s)
	r.c.Refresh(context.Background())
	if got := r.c.Snapshot().Keys; got != activeKeys {
		t.Fatalf("after one pass: %d keys, want the %d active ones (the idle ones dropped in every shard)", got, activeKeys)
	}
	// the active keys are refreshed across passes, every shard in turn
	before := r.store.reads.Load()
	for range 8 {
		r.c.Refresh(context.Background())
	}
	if r.store.reads.Load()-before < 4 { // 16,384 keys left after the first pass: 4 passes of 4,096
		t.Fatalf("only %d reads over 8 passes", r.store.reads.Load()-before)
	}
	var stale int
	for i := range r.c.shards {
		sh := &r.c.shards[i]
		sh.mu.Lock()
		if sh.refresh.Len() > 0 && sh.refresh.Min().nextRefresh <= r.clk.Now() { // its earliest is due
			stale++
		}
		sh.mu.Unlock()
	}
	if stale != 0 {
		t.Fatalf("%d shards with keys still due after 8 passes of %d reads", stale, refreshBatch)
	}
}
