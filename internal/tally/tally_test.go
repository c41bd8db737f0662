package tally

import (
	"testing"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

func TestTally(t *testing.T) {
	const now = int64(90e9)
	tests := []struct {
		name    string
		allowed bool
		why     Refusal
		charged bool
		want    Pending
	}{
		{"allowed", true, Denied, false, Pending{AllowedCount: 1, AllowedCost: 3}},
		{"denied", false, Denied, false, Pending{DeniedCount: 1, DeniedCost: 3}},
		{"denied, counted all the same", false, Denied, true, Pending{DeniedCount: 1, DeniedCost: 3}},
		{"deferred", false, Deferred, false, Pending{Deferred: 1}},
		// a charged refusal never defers: its hits count
		{"deferred, charged", false, Deferred, true, Pending{DeniedCount: 1, DeniedCost: 3}},
		{"shadow", false, Shadow, false, Pending{ShadowDenied: 1}},
		{"shadow, charged", false, Shadow, true, Pending{ShadowDenied: 1, DeniedCost: 3}},
		// a release is nobody's decision: only its hits
		{"release admitted", true, Release, false, Pending{AllowedCost: 3}},
		{"release not yet", false, Release, false, Pending{}},
		{"release not yet, charged", false, Release, true, Pending{DeniedCost: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Pending
			p.Tally(now, 3, tt.allowed, tt.why, tt.charged)
			want := tt.want
			if want != (Pending{}) {
				want.First, want.Last = now, now
			}
			if p != want {
				t.Fatalf("got %+v, want %+v", p, want)
			}
			if p.Used() != (want != Pending{}) {
				t.Fatalf("Used() = %v with %+v", p.Used(), p)
			}
		})
	}
}

// TestMinuteRows: a delta carries its minute's cumulative row; a new
// minute starts from zero, and a late pending never goes back.
func TestMinuteRows(t *testing.T) {
	u := NewMinute(7)
	steps := []struct {
		at            int64 // unix s
		allowed, over uint32
		wantMinute    int64
		wantAllowed   uint64
	}{
		{60, 2, 1, 60, 2},
		{119, 3, 0, 60, 5},
		{120, 1, 0, 120, 1},
		{61, 4, 0, 120, 5}, // late: folded into the current minute
	}
	for i, st := range steps {
		p := Pending{First: st.at * 1e9, Last: st.at * 1e9, AllowedCount: st.allowed, AllowedCost: uint64(st.allowed), OverSoft: st.over}
		var d eventsv1.Delta
		p.Fill(&d, &u)
		m := d.Minute
		if m.MinuteUnix != st.wantMinute || m.AllowedCount != st.wantAllowed || m.AllowedCost != st.wantAllowed || m.Stream != 7 {
			t.Fatalf("step %d: row %+v, want minute %d with %d allowed", i, m, st.wantMinute, st.wantAllowed)
		}
		if d.AllowedCount != uint64(st.allowed) || d.FirstUnixNanos != st.at*1e9 {
			t.Fatalf("step %d: delta counts %d first %d", i, d.AllowedCount, d.FirstUnixNanos)
		}
	}
	if got := u.overSoft; got != 0 {
		t.Fatalf("over_soft of minute 120: %d, want 0 (minute 60's does not carry over)", got)
	}
}
