package config

import (
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/limiter"
)

// TestOverrideRuleMultiplier: an Envoy limit override with
// unit_multiplier N counts limit hits per window of N units, aligned to
// it: the multiplier lengthens the window once (the rule's, its limiter's
// and its id's), and never touches the limit.
func TestOverrideRuleMultiplier(t *testing.T) {
	// t0 is a multiple of a day, so every window below starts there.
	const t0 = int64(1_700_006_400) * 1e9
	cases := []struct {
		limit  int64
		unit   Unit
		mult   uint32
		window time.Duration
		id     string
	}{
		{5, Second, 30, 30 * time.Second, "d:override:k@5/30second"},
		{7, Minute, 2, 2 * time.Minute, "d:override:k@7/2minute"},
		{3, Hour, 1, time.Hour, "d:override:k@3/hour"},
		{4, Second, 0, time.Second, "d:override:k@4/second"}, // 0 is 1, as in Envoy
	}
	for i, c := range cases {
		r, err := OverrideRule("d", entries("k", "v"), c.limit, c.unit, c.mult, nil)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want := limiter.FixedWindow{Limit: c.limit, Window: c.window, ChargeDenied: true}
		switch {
		case r.ID != c.id:
			t.Fatalf("case %d: id %q, want %q", i, r.ID, c.id)
		case r.Window != c.window || r.Unit != c.unit:
			t.Fatalf("case %d: window %v unit %s, want %v %s", i, r.Window, r.Unit, c.window, c.unit)
		case r.Limit != c.limit || r.Ceiling() != c.limit || r.Capacity() != c.limit:
			t.Fatalf("case %d: limit %d ceiling %d capacity %d, want %d", i, r.Limit, r.Ceiling(), r.Capacity(), c.limit)
		case r.Limiter != want:
			t.Fatalf("case %d: limiter %#v, want %#v", i, r.Limiter, want)
		}
		// the limit per window, the window's last ns and the next one's first
		var s limiter.State
		end := t0 + int64(c.window)
		steps := []struct {
			at, cost int64
			allowed  bool
		}{
			{t0, c.limit, true},
			{end - 1, 1, false},
			{end, c.limit, true},
		}
		for j, st := range steps {
			if d, _ := r.Limiter.AllowAt(&s, st.at, st.cost); d.Allowed != st.allowed {
				t.Fatalf("case %d step %d: at %v cost %d allowed %v, want %v", i, j, time.Duration(st.at-t0), st.cost, d.Allowed, st.allowed)
			}
		}
	}
	// Two multipliers of one descriptor and limit are two counters.
	a, _ := OverrideRule("d", entries("k", "v"), 5, Second, 30, nil)
	b, _ := OverrideRule("d", entries("k", "v"), 5, Second, 60, nil)
	if a.ID == b.ID || !strings.HasSuffix(b.ID, "@5/60second") {
		t.Fatalf("ids %q and %q: want distinct, the second ending @5/60second", a.ID, b.ID)
	}
}
