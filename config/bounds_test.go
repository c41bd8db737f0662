package config

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestRequestsPerUnitBounds: at 0, at the bound, one past it and at the
// int64 maximum, for every throttle type; at the bound the ceiling the
// type's largest overage or multiplier derives is exact (no overflow).
func TestRequestsPerUnitBounds(t *testing.T) {
	for _, tt := range []ThrottleType{"", ThrottleHard, ThrottleSoft, ThrottleElastic} {
		maxN := MaxRequestsPerUnit(tt)
		tests := []struct {
			n  int64
			ok bool
		}{{-1, false}, {0, true}, {1, true}, {maxN, true}, {maxN + 1, maxN == math.MaxInt64}, {math.MaxInt64, maxN == math.MaxInt64}, {math.MinInt64, false}}
		for i, tc := range tests {
			if maxN == math.MaxInt64 && tc.n == maxN+1 {
				continue // maxN + 1 wraps: the int64 maximum is its own bound
			}
			err := CheckRequestsPerUnit(tt, tc.n)
			if (err == nil) != tc.ok {
				t.Errorf("%q step %d n=%d: got %v, want ok=%v", tt, i, tc.n, err, tc.ok)
			}
		}
	}
	// The ceilings at the bound, with the largest overage and multiplier.
	soft := &Rule{Limit: MaxRequestsPerUnit(ThrottleSoft), Throttle: Throttle{Type: ThrottleSoft, OveragePercent: MaxOveragePercent}}
	soft.derive()
	if want := soft.Limit + soft.Limit*MaxOveragePercent/100; soft.Ceiling() < want || soft.Ceiling() <= 0 {
		t.Errorf("soft ceiling at the bound: %d, want about %d", soft.Ceiling(), want)
	}
	el := &Rule{Limit: MaxRequestsPerUnit(ThrottleElastic), Throttle: Throttle{Type: ThrottleElastic, MaxMultiplier: MaxMaxMultiplier}}
	el.derive()
	if el.Ceiling() != el.Limit*MaxMaxMultiplier || el.Ceiling() <= 0 || el.Ceiling()/MaxMaxMultiplier != el.Limit {
		t.Errorf("elastic ceiling at the bound: %d for limit %d", el.Ceiling(), el.Limit)
	}
}

func TestPoolCapacityBound(t *testing.T) {
	for i, tc := range []struct {
		n  int64
		ok bool
	}{{math.MinInt64, false}, {-1, false}, {0, false}, {1, true}, {math.MaxInt64, true}} {
		if err := CheckPoolCapacity(tc.n); (err == nil) != tc.ok {
			t.Errorf("step %d n=%d: got %v, want ok=%v", i, tc.n, err, tc.ok)
		}
	}
}

// TestCheckLimit: an override's limit is held to the rule's throttle and
// to the burst WithLimit scales by it; what it accepts WithLimit derives
// without overflow.
func TestCheckLimit(t *testing.T) {
	hard := &Rule{ID: "d:hard", Limit: 4, Throttle: Throttle{Type: ThrottleHard}}
	burst := &Rule{ID: "d:burst", Limit: 4, Burst: 1000, Algorithm: AlgTokenBucket, Unit: Minute, Window: Minute.Duration(), Throttle: Throttle{Type: ThrottleHard}}
	el := &Rule{ID: "d:el", Limit: 4, Algorithm: AlgFixedWindow, Unit: Minute, Window: Minute.Duration(), Throttle: Throttle{Type: ThrottleElastic, MaxMultiplier: 3}}
	tests := []struct {
		r     *Rule
		limit int64
		ok    bool
	}{
		{hard, 0, true}, {hard, math.MaxInt64, true}, {hard, -1, false},
		{burst, 0, true}, {burst, math.MaxInt64 / 1000, true}, {burst, math.MaxInt64/1000 + 1, false}, {burst, 1 << 62, false},
		{el, 0, true}, {el, MaxRequestsPerUnit(ThrottleElastic), true}, {el, MaxRequestsPerUnit(ThrottleElastic) + 1, false}, {el, 1 << 62, false},
	}
	for i, tc := range tests {
		err := tc.r.CheckLimit(tc.limit)
		if (err == nil) != tc.ok {
			t.Errorf("step %d %s limit %d: got %v, want ok=%v", i, tc.r.ID, tc.limit, err, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		r, werr := tc.r.WithLimit(tc.limit)
		if werr != nil {
			t.Errorf("step %d %s limit %d: CheckLimit accepted what WithLimit refuses: %v", i, tc.r.ID, tc.limit, werr)
			continue
		}
		if r.Ceiling() < r.Limit || r.Capacity() < 0 || (tc.limit > 0 && r.Burst < 0) {
			t.Errorf("step %d %s limit %d: derived ceiling %d capacity %d burst %d (overflowed)", i, tc.r.ID, tc.limit, r.Ceiling(), r.Capacity(), r.Burst)
		}
	}
}

// TestRuleFileLimitBounds: a rule file's requests_per_unit at the bound of
// its throttle loads; one past it is refused at its line, naming the
// field (the same function bounds an operator's override).
func TestRuleFileLimitBounds(t *testing.T) {
	const file = `domain: d
pools:
  - name: p
    rate_limit: {unit: minute, requests_per_unit: %d}
descriptors:
  - key: k
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: %d}
    throttle: %s
`
	tests := []struct {
		name     string
		throttle string
		pool, n  int64
		want     string // "" loads
	}{
		{"hard at the int64 maximum", "{type: hard}", 1, math.MaxInt64, ""},
		{"soft at the bound", "{type: soft, overage_percent: 1000}", 1, MaxRequestsPerUnit(ThrottleSoft), ""},
		{"soft past the bound", "{type: soft, overage_percent: 1}", 1, MaxRequestsPerUnit(ThrottleSoft) + 1, "bad.yaml:6:5: descriptor \"k\": requests_per_unit: at most"},
		{"elastic at the bound", "{type: elastic, pool: p, max_multiplier: 100}", 1, MaxRequestsPerUnit(ThrottleElastic), ""},
		{"elastic past the bound", "{type: elastic, pool: p}", 1, MaxRequestsPerUnit(ThrottleElastic) + 1, "bad.yaml:6:5: descriptor \"k\": requests_per_unit: at most"},
		{"elastic 2^62", "{type: elastic, pool: p}", 1, 1 << 62, "requests_per_unit: at most"},
		{"pool at the int64 maximum", "{type: hard}", math.MaxInt64, 1, ""},
		{"pool 0", "{type: hard}", 0, 1, "bad.yaml:3:5: pool \"p\": a pool is a capacity: requests_per_unit: want at least 1, got 0"},
	}
	for i, tc := range tests {
		f, err := ParseRules("bad.yaml", []byte(fmt.Sprintf(file, tc.pool, tc.n, tc.throttle)))
		if err == nil {
			_, err = Compile([]*File{f})
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("step %d %s: %v", i, tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("step %d %s: got %v, want %q", i, tc.name, err, tc.want)
		}
	}
}
