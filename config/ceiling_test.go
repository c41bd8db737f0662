package config

import (
	"fmt"
	"testing"
)

// TestCeilingAndCapacity: what a rule admits per window, derived once
// from its throttle and burst: a soft throttle's overage is rounded up
// (never below the promised percentage), an elastic one multiplies, and a
// burst sizes a bucket; WithLimit scales the burst with the new limit.
func TestCeilingAndCapacity(t *testing.T) {
	cases := []struct {
		extra             string // the descriptor's lines besides key and rate_limit
		limit             int64
		ceiling, capacity int64
		withLimit         int64 // then WithLimit(withLimit)
		wantCapacity      int64
	}{
		{"algorithm: fixed_window", 10, 10, 10, 4, 4},
		{"algorithm: fixed_window\n    throttle: {type: soft, overage_percent: 15}", 10, 12, 12, 7, 9}, // 1.5 and 1.05 round up
		{"algorithm: fixed_window\n    throttle: {type: soft, overage_percent: 50}", 10, 15, 15, 3, 5},
		{"algorithm: fixed_window\n    throttle: {type: elastic, pool: p, max_multiplier: 3}", 10, 30, 30, 4, 12},
		{"algorithm: token_bucket\n    burst: 25", 10, 10, 25, 4, 10}, // the burst scales with the limit: 25 × 4/10
		{"algorithm: token_bucket\n    burst: 3", 10, 10, 3, 1, 1},    // never below 1
	}
	for i, c := range cases {
		src := fmt.Sprintf("domain: d\npools:\n  - name: p\n    rate_limit: {unit: second, requests_per_unit: 100}\ndescriptors:\n  - key: k\n    %s\n    rate_limit: {unit: second, requests_per_unit: %d}\n", c.extra, c.limit)
		f, err := ParseRules("c.yaml", []byte(src))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		rs, err := Compile([]*File{f})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		r := rs.Match("d", entries("k", "v"))
		if r.Ceiling() != c.ceiling || r.Capacity() != c.capacity || r.Limiter.Max() != c.capacity {
			t.Fatalf("case %d: ceiling %d capacity %d limiter max %d, want %d %d", i, r.Ceiling(), r.Capacity(), r.Limiter.Max(), c.ceiling, c.capacity)
		}
		w, err := r.WithLimit(c.withLimit)
		if err != nil {
			t.Fatalf("case %d: WithLimit(%d): %v", i, c.withLimit, err)
		}
		if w.Limit != c.withLimit || w.Capacity() != c.wantCapacity || w.Limiter.Max() != c.wantCapacity || w.ID != r.ID {
			t.Fatalf("case %d: WithLimit(%d): limit %d capacity %d limiter max %d id %q, want capacity %d, id %q",
				i, c.withLimit, w.Limit, w.Capacity(), w.Limiter.Max(), w.ID, c.wantCapacity, r.ID)
		}
	}
	// limit 0 refuses everything: no limiter to run
	r := &Rule{Limit: 10, Algorithm: AlgFixedWindow, Window: 1e9}
	r.derive()
	r.Limiter = r.buildLimiter()
	if w, err := r.WithLimit(0); err != nil || w.Limiter != nil || w.Limit != 0 {
		t.Fatalf("WithLimit(0): %+v %v, want limit 0 and no limiter", w, err)
	}
}
