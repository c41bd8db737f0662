package checker

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// memKeys lists the counter keys the store holds.
func memKeys(s *counters.MemStore) []string { return s.Keys() }

const hashRules = `domain: api
descriptors:
  - key: api_key
    hash_values: true
    algorithm: fixed_window
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: user
        hash_values: true
        algorithm: fixed_window
        rate_limit: {unit: second, requests_per_unit: 5}
`

// TestHashValuesNeverLeave: hashed values count exactly like plain ones,
// but no delta (Kafka) and no store key (Redis) carries them; two
// checkers with the same key agree on the hash, the caller's request is
// left as it was.
func TestHashValuesNeverLeave(t *testing.T) {
	var descs [2][]string
	for i := range 2 {
		ms := counters.NewMemStore()
		prod := &applyProducer{store: ms}
		clk := &clock{}
		clk.ns.Store(t0)
		ms.SetClock(clk)
		c, err := New(Config{CheckerConfig: config.CheckerConfig{HashKey: "shared secret"}}, ruleStore(t, hashRules), ms, prod, clk)
		if err != nil {
			t.Fatal(err)
		}
		q := req(1, "api_key", "sk_live_SECRET")
		var d ratelimit.Decision
		for range 2 {
			if err := c.Check(context.Background(), q, &d); err != nil || d.Code != ratelimit.OK {
				t.Fatalf("within the limit: %v %s", err, codes(d))
			}
		}
		if err := c.Check(context.Background(), q, &d); err != nil || d.Code != ratelimit.OverLimit {
			t.Fatalf("over the limit: %v %s", err, codes(d))
		}
		if q.Descriptors[0].Entries[0].Value != "sk_live_SECRET" {
			t.Fatal("the caller's request was modified")
		}
		other := req(1, "api_key", "sk_live_OTHER")
		if err := c.Check(context.Background(), other, &d); err != nil || d.Code != ratelimit.OK {
			t.Fatalf("another key shares the counter: %s", codes(d))
		}
		nested := &ratelimit.Request{Domain: "api", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{
			{Key: "tenant", Value: "acme"}, {Key: "user", Value: "priya@example.com"}}}}}
		if err := c.Check(context.Background(), nested, &d); err != nil || d.Code != ratelimit.OK || d.Statuses[0].Remaining != 4 {
			t.Fatalf("nested: %v %s", err, codes(d))
		}
		if err := c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, dl := range prod.all {
			text := dl.String()
			if strings.Contains(text, "SECRET") || strings.Contains(text, "OTHER") || strings.Contains(text, "priya") {
				t.Fatalf("a delta carries a raw value: %s", text)
			}
			if !strings.Contains(text, "acme") && strings.Contains(dl.DescriptorText, "tenant") {
				t.Fatalf("an unhashed value was hashed: %s", text)
			}
			descs[i] = append(descs[i], dl.DescriptorText)
		}
		for _, k := range memKeys(ms) {
			if strings.Contains(k, "SECRET") || strings.Contains(k, "priya") {
				t.Fatalf("a store key carries a raw value: %s", k)
			}
		}
	}
	slices.Sort(descs[0])
	slices.Sort(descs[1])
	if len(descs[0]) == 0 || strings.Join(descs[0], "|") != strings.Join(descs[1], "|") {
		t.Fatalf("two checkers with one key disagree:\n%v\n%v", descs[0], descs[1])
	}
}

func TestHashValuesWithoutKeyWarnsOnce(t *testing.T) {
	var log bytes.Buffer
	ms := counters.NewMemStore()
	clk := &clock{}
	clk.ns.Store(t0)
	c, err := New(Config{Logger: slog.New(slog.NewTextHandler(&log, nil))}, ruleStore(t, hashRules), ms, &applyProducer{store: ms}, clk)
	if err != nil {
		t.Fatal(err)
	}
	var d ratelimit.Decision
	for range 3 {
		if err := c.Check(context.Background(), req(1, "api_key", "k"), &d); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(log.String(), "VELVETROPE_HASH_KEY"); n != 1 {
		t.Fatalf("%d warnings:\n%s", n, log.String())
	}
}
