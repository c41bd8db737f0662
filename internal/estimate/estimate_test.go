package estimate

import (
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/limiter"
)

func TestWindow(t *testing.T) {
	tests := []struct {
		name               string
		w                  Window
		fresh              bool
		chargedNow         int64
		total, own, base   int64
		ownMem, ownSync    int64
		wantEmitted        int64
		wantCharged        int64
		wantOthers, wantMe int64
	}{
		// known key: the answer replaces the store's part, not the own counts
		{"known", Window{Emitted: 5, Charged: 2}, false, 0, 30, 7, 0, 40, 40, 5, 2, 23, 7},
		// a key created again takes back what the store holds of it, less
		// the answering charge's own hits
		{"fresh", Window{Emitted: 1}, true, 3, 30, 10, 0, 6, 7, 6, 4, 20, 10},
		// a reset's base is no longer this instance's
		{"reset", Window{Emitted: 8, Charged: 2}, false, 0, 0, 0, 10, 0, 0, 8, 2, 0, 0},
		// the other instances never count below zero
		{"own above total", Window{}, false, 0, 3, 5, 0, 0, 0, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		w := tt.w
		w.Absorb(tt.total, tt.own, tt.base, tt.ownMem, tt.ownSync, tt.fresh, tt.chargedNow)
		if !w.Known || w.Emitted != tt.wantEmitted || w.Charged != tt.wantCharged {
			t.Errorf("%s: known %v, emitted %d, charged %d; want true, %d, %d", tt.name, w.Known, w.Emitted, w.Charged,
				tt.wantEmitted, tt.wantCharged)
		}
		if w.Others() != tt.wantOthers || w.Mine() != tt.wantMe {
			t.Errorf("%s: others %d, mine %d; want %d, %d", tt.name, w.Others(), w.Mine(), tt.wantOthers, tt.wantMe)
		}
	}
}

func TestBucket(t *testing.T) {
	r := testrules.Store(t, `domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
    algorithm: gcra
`).Load().Match("api", []config.Entry{{Key: "user", Value: "a"}})
	g := GCRA(r)
	per := int64(time.Second) / 10 // one token's time
	const now = int64(1_000_000_000_000)
	var b Bucket
	b.Absorb(r, false, now+5*per, 5, 0, 0, 0, now) // not found: nothing learned
	if b.State != (limiter.State{}) || b.StoreCum != 0 {
		t.Fatal("a bucket not found changed the view")
	}
	// the store's TAT, plus the 2 hits it has not applied of this instance's
	b.Cum = 2
	b.Absorb(r, true, now+5*per, 9, 4, 0, 0, now)
	if got, want := g.TAT(&b.State), now+7*per; got != want {
		t.Fatalf("TAT %d, want %d (the store's plus two unapplied hits)", got, want)
	}
	if b.Others() != 5 || b.Mine() != 2 {
		t.Fatalf("others %d, mine %d: want 5 and 2", b.Others(), b.Mine())
	}
	before := b.State
	if d := b.Peek(r, now, 1); !d.Allowed || b.State != before {
		t.Fatalf("peek %+v changed the view or refused", d)
	}
	// an operator's reset (a new generation) forgets the view; unapplied
	// hits count from now, not from the reset bucket's past TAT
	b.Absorb(r, true, now-time.Hour.Nanoseconds(), 0, 0, 0, 1, now)
	if got, want := g.TAT(&b.State), now+2*per; got != want || b.Gen != 1 {
		t.Fatalf("after a reset: TAT %d gen %d, want %d and 1", got, b.Gen, want)
	}
	b.Rebase(6, 3, 1)
	if b.Cum != 6 || b.CumCharged != 2 {
		t.Fatalf("rebase: cum %d charged %d, want 6 and 2", b.Cum, b.CumCharged)
	}
}
