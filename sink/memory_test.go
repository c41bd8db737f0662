package sink

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMemoryBoundInBytes (issue 19, item 8): dev's in-memory analytics
// kept 24 h of rows with no cap. Past its bound in bytes the rows of the
// oldest minutes go first, counted; newer versions of a row replace it
// without growing the store, and the queries see what is kept.
func TestMemoryBoundInBytes(t *testing.T) {
	m := NewMemory(24 * time.Hour)
	m.SetClock(func() time.Time { return t0.Add(time.Hour) })
	desc := strings.Repeat("d", 1000)
	row := func(minute, i int, version uint64) Row {
		return Row{Minute: t0.Unix() + int64(minute)*60, Domain: "api", Rule: "api:r", Descriptor: fmt.Sprintf("%d-%s", i, desc),
			Instance: "c/1", Stream: uint64(i), Version: version, Allowed: version}
	}
	r0 := row(0, 0, 1)
	per := rowBytes(&r0)
	m.SetMaxBytes(100 * per) // about 100 rows
	ctx := context.Background()
	for minute := range 10 {
		var rows []Row
		for i := range 30 {
			rows = append(rows, row(minute, i, 1))
		}
		if err := m.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if b := m.Bytes(); b > 100*per+per {
			t.Fatalf("minute %d: %d bytes held, above the bound %d", minute, b, 100*per)
		}
	}
	if got, want := m.Dropped.Load(), uint64(300-m.Len()); got != want || m.Len() < 90 {
		t.Fatalf("%d rows held, %d dropped: want about 100 held and the rest counted (%d)", m.Len(), got, want)
	}
	// the newest minutes are kept whole, the oldest are gone
	usage, err := m.Timeline(ctx, TimelineQuery{Since: t0})
	if err != nil {
		t.Fatal(err)
	}
	if first, last := usage[0], usage[len(usage)-1]; last.Minute != time.Unix(t0.Unix()+9*60, 0).UTC() || last.Allowed != 30 || first.Minute.Before(t0.Add(6*time.Minute)) {
		t.Fatalf("timeline after the bound: %+v", usage)
	}
	// new versions replace rows in place
	before := m.Bytes()
	var again []Row
	for i := range 30 {
		again = append(again, row(9, i, 2))
	}
	if err := m.Insert(ctx, again); err != nil {
		t.Fatal(err)
	}
	if m.Bytes() != before {
		t.Fatalf("replacing versions changed the bytes held: %d, was %d", m.Bytes(), before)
	}
}
