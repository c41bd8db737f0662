package checker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
)

// engines returns both engines over asyncRules, with request ids
// remembered for a minute, and a function that advances their clock.
func engines(t *testing.T) map[string]struct {
	check   func(*Request, *Decision) error
	advance func(time.Duration)
} {
	t.Helper()
	r := newRig(t, Config{IdempotencyTTL: time.Minute})
	l, lclk := newLocal(t)
	return map[string]struct {
		check   func(*Request, *Decision) error
		advance func(time.Duration)
	}{
		"async": {func(q *Request, d *Decision) error { return r.c.Check(context.Background(), q, d) },
			func(d time.Duration) { r.clk.ns.Add(int64(d)) }},
		"local": {func(q *Request, d *Decision) error { return l.Check(context.Background(), q, d) },
			func(d time.Duration) { lclk.ns.Add(int64(d)) }},
	}
}

// TestRequestIDBoundToItsRequest: issue 10, item 2. Before, the replay
// cache was keyed by (domain, id) alone, so the same id with a million
// hits, or with another user's descriptor, got the first answer, uncharged.
func TestRequestIDBoundToItsRequest(t *testing.T) {
	for name, e := range engines(t) {
		t.Run(name, func(t *testing.T) {
			key := "fixed"
			if name == "local" {
				key = "user_id"
			}
			first := req(1, key, "alice")
			first.RequestID = "r1"
			other := func(mod func(*Request)) *Request {
				q := req(1, key, "alice")
				q.RequestID = "r1"
				mod(q)
				return q
			}
			steps := []struct {
				name     string
				q        *Request
				conflict bool
			}{
				{"first use", first, false},
				{"a retry of the same request", first, false},
				{"the same id with more hits", other(func(q *Request) { q.Hits = 1000000 }), true},
				{"the same id for another user", other(func(q *Request) { q.Descriptors[0].Entries[0].Value = "mallory" }), true},
				{"the same id with a descriptor's own hits", other(func(q *Request) { q.Descriptors[0].Hits, q.Descriptors[0].HasHits = 1, true }), true},
				{"the same id with one more descriptor", other(func(q *Request) {
					q.Descriptors = append(q.Descriptors, Descriptor{Entries: []config.Entry{{Key: key, Value: "bob"}}})
				}), true},
				{"another id", other(func(q *Request) { q.RequestID = "r2" }), false},
			}
			var firstAnswer Decision
			for i, s := range steps {
				var d Decision
				err := e.check(s.q, &d)
				if s.conflict {
					var fe *FieldError
					if !errors.Is(err, ErrRequestIDConflict) || !errors.As(err, &fe) || fe.Field != "request_id" {
						t.Fatalf("step %d (%s): got %v, want a request_id conflict", i, s.name, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, s.name, err)
				}
				if i == 0 {
					firstAnswer = d
				}
				if i == 1 && (d.Code != firstAnswer.Code || d.Statuses[0].Remaining != firstAnswer.Statuses[0].Remaining) {
					t.Fatalf("retry: got %+v, want the first answer %+v", d.Statuses[0], firstAnswer.Statuses[0])
				}
			}
			e.advance(2 * time.Minute) // past the TTL the id is free again
			var d Decision
			if err := e.check(other(func(q *Request) { q.Hits = 2 }), &d); err != nil {
				t.Fatalf("after the TTL: %v", err)
			}
		})
	}
}

// TestBounds: issue 10, item 5. Before, a 600 KB value was accepted and
// made a delta neither the aggregator nor the broker would take.
func TestBounds(t *testing.T) {
	for name, e := range engines(t) {
		t.Run(name, func(t *testing.T) {
			many := &Request{Domain: "api", Hits: 1}
			for range 17 {
				many.Descriptors = append(many.Descriptors, Descriptor{Entries: []config.Entry{{Key: "user_id", Value: "x"}}})
			}
			wide := req(1, "user_id", "x")
			for range 8 {
				wide.Descriptors[0].Entries = append(wide.Descriptors[0].Entries, config.Entry{Key: "k", Value: "v"})
			}
			longID := req(1, "user_id", "x")
			longID.RequestID = strings.Repeat("i", 129)
			cases := []struct {
				name, field string
				q           *Request
			}{
				{"a 600 KB value", "descriptors[0].entries[0].value", req(1, "user_id", strings.Repeat("v", 600<<10))},
				{"a value one byte above the bound", "descriptors[1].entries[0].value", req(1, "user_id", "ok", "user_id", strings.Repeat("v", 1025))},
				{"a long key", "descriptors[0].entries[0].key", req(1, strings.Repeat("k", 129), "v")},
				{"a value that is not UTF-8", "descriptors[0].entries[0].value", req(1, "user_id", "\xff\xfe")},
				{"17 descriptors", "descriptors", many},
				{"9 entries", "descriptors[0].entries", wide},
				{"a long request id", "request_id", longID},
			}
			for i, c := range cases {
				var d Decision
				err := e.check(c.q, &d)
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrBadRequest) {
					t.Fatalf("step %d (%s): got %v, want a bad request naming %s", i, c.name, err, c.field)
				}
			}
			var d Decision
			if err := e.check(req(1, "user_id", strings.Repeat("v", 1024)), &d); err != nil {
				t.Fatalf("a value at the bound: %v", err)
			}
		})
	}
}

func TestBoundsValidate(t *testing.T) {
	cases := []struct {
		b    Bounds
		want string
	}{
		{DefaultBounds(), ""},
		{Bounds{MaxDescriptors: 33, MaxEntries: 8, MaxKeyBytes: 1, MaxValueBytes: 1, MaxRequestIDBytes: 1}, "max_descriptors"},
		{Bounds{MaxDescriptors: 1, MaxEntries: 16, MaxKeyBytes: 128, MaxValueBytes: 4096, MaxRequestIDBytes: 1}, "would not fit"},
		{Bounds{MaxDescriptors: 1, MaxEntries: 1, MaxKeyBytes: 0, MaxValueBytes: 1, MaxRequestIDBytes: 1}, "max_key_bytes"},
	}
	for i, c := range cases {
		err := c.b.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Fatalf("step %d: got %v, want %q", i, err, c.want)
		}
	}
	if _, err := New(Config{Bounds: Bounds{MaxEntries: 16, MaxValueBytes: 8192}}, ruleStore(t, asyncRules), counters.NewMemStore(),
		&applyProducer{store: counters.NewMemStore()}, &clock{}); err == nil || !strings.Contains(err.Error(), "bounds") {
		t.Fatalf("New accepted bounds that make oversized deltas: %v", err)
	}
}

// TestLargestValidRequestMakesDeliverableDeltas: a request at every bound
// (8 entries of 128-byte keys and 1,024-byte values, matching a rule 8
// levels deep) produces deltas that encode within events.MaxRecordBytes,
// so the aggregator and the broker take them.
func TestLargestValidRequestMakesDeliverableDeltas(t *testing.T) {
	b := DefaultBounds()
	var src strings.Builder
	src.WriteString("domain: " + strings.Repeat("d", 200) + "\ndescriptors:\n")
	ind := "  "
	keys := make([]string, b.MaxEntries)
	for i := range keys {
		keys[i] = strings.Repeat(string(rune('a'+i)), b.MaxKeyBytes)
		src.WriteString(ind + "- key: " + keys[i] + "\n")
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
	c, err := New(Config{InstanceName: strings.Repeat("i", 200)}, ruleStore(t, src.String()), ms, prod, clk)
	if err != nil {
		t.Fatal(err)
	}
	q := &Request{Domain: strings.Repeat("d", 200), Hits: 1}
	for i := range b.MaxDescriptors {
		es := make([]config.Entry, len(keys))
		for j := range es {
			es[j] = config.Entry{Key: keys[j], Value: strings.Repeat(string(rune('A'+i)), b.MaxValueBytes)}
		}
		q.Descriptors = append(q.Descriptors, Descriptor{Entries: es})
	}
	var d Decision
	if err := c.Check(context.Background(), q, &d); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(prod.all) != b.MaxDescriptors {
		t.Fatalf("got %d deltas, want %d", len(prod.all), b.MaxDescriptors)
	}
	for i, dl := range prod.all {
		wire, err := events.Encode(dl)
		if err != nil || len(wire) > events.MaxRecordBytes {
			t.Fatalf("delta %d: %d bytes (bound %d), err %v", i, len(wire), events.MaxRecordBytes, err)
		}
	}
}

// TestRefreshReachesEveryShard: with more keys due than one refresher pass
// reads, passes used to start at shard 0 every time, so the last shards
// were never refreshed and their idle keys never dropped (the soak's
// checker grew without bound). Now idle keys are dropped in every shard on
// every pass and the passes rotate.
func TestRefreshReachesEveryShard(t *testing.T) {
	r := newRig(t, Config{Shards: 4, MaxKeys: 1 << 16})
	const idleKeys, activeKeys = 4000, 5 * refreshBatch
	for i := range idleKeys {
		r.check(t, 1, "fixed", fmt.Sprintf("idle-%d", i))
	}
	if err := r.c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.clk.ns.Add(int64(3 * time.Minute)) // past idle_after (2 min)
	for i := range activeKeys {
		r.check(t, 1, "fixed", fmt.Sprintf("active-%d", i))
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
		for _, e := range sh.refresh {
			if e.nextRefresh <= r.clk.Now() {
				stale++
			}
		}
		sh.mu.Unlock()
	}
	if stale != 0 {
		t.Fatalf("%d keys still due after 8 passes of %d reads", stale, refreshBatch)
	}
}
