package compact

import (
	"math/rand/v2"
	"testing"
)

// model is what the table must agree with: by hash, the record's window
// end and spent hits.
type model map[uint64]struct{ until, spent int64 }

// TestTableAgreesWithAMap drives a table and a map with the same random
// operations on few hashes (long probe chains, removals inside them, ended
// windows) and compares every live record after each step.
func TestTableAgreesWithAMap(t *testing.T) {
	for _, tc := range []struct {
		name         string
		hashes, max  int
		steps, seeds int
	}{
		{"unbounded", 200, 0, 20000, 4},
		{"bounded", 200, 50, 20000, 4},
		{"colliding homes", 40, 0, 5000, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(tc.seeds) {
				rng := rand.New(rand.NewPCG(seed, 7))
				hashes := make([]uint64, tc.hashes)
				for i := range hashes {
					hashes[i] = rng.Uint64()
					if tc.name == "colliding homes" {
						hashes[i] = uint64(i) << 60 // few top bits: homes collide at small sizes
					}
				}
				hashes[0] = 0 // the hash that marks an empty place must work too
				tb, m := New(tc.max), model{}
				now := int64(1)
				live := func() int {
					n := 0
					for _, v := range m {
						if v.until > now {
							n++
						}
					}
					return n
				}
				for step := range tc.steps {
					h := hashes[rng.IntN(len(hashes))]
					until := now + 1 + rng.Int64N(20)
					if v, ok := m[h]; ok && v.until > now && rng.IntN(4) > 0 {
						until = v.until // mostly the same window again
					}
					switch op := rng.IntN(10); {
					case op < 6:
						r := tb.Make(h, until, now)
						if v, ok := m[h]; ok && v.until > until {
							if r != nil {
								t.Fatalf("seed %d step %d: a request of an earlier window got the record of a later one", seed, step)
							}
							continue // a clock behind the record: its window is not started over
						}
						if r == nil {
							if tc.max == 0 || live() < tc.max {
								t.Fatalf("seed %d step %d: Make refused with %d of %d live", seed, step, live(), tc.max)
							}
							continue
						}
						if v := m[h]; v.until != until {
							m[h] = struct{ until, spent int64 }{until, 0}
						}
						if int64(r.Spent) != m[h].spent {
							t.Fatalf("seed %d step %d: Make found %d spent, want %d", seed, step, r.Spent, m[h].spent)
						}
						r.Spent++
						m[h] = struct{ until, spent int64 }{until, m[h].spent + 1}
					case op < 8:
						tb.Remove(h)
						delete(m, h)
					default:
						now += rng.Int64N(3)
					}
					if tc.max > 0 && tb.Len() > tc.max+len(hashes) {
						t.Fatalf("seed %d step %d: %d records for a bound of %d", seed, step, tb.Len(), tc.max)
					}
					for h, v := range m {
						if v.until <= now {
							continue // ended: may be gone
						}
						r := tb.Find(h, v.until)
						if r == nil || int64(r.Spent) != v.spent {
							t.Fatalf("seed %d step %d: hash %x: found %v, want %d spent", seed, step, h, r, v.spent)
						}
						if tb.Find(h, v.until+1) != nil {
							t.Fatalf("seed %d step %d: hash %x found in a window it has no record of", seed, step, h)
						}
					}
					for _, h := range hashes {
						if _, ok := m[h]; !ok && tb.Find(h, until) != nil {
							t.Fatalf("seed %d step %d: removed hash %x still found", seed, step, h)
						}
					}
				}
			}
		})
	}
}

// TestTableBoundAndEnds: a full table refuses new records until one's
// window ends, then frees the ended ones.
func TestTableBoundAndEnds(t *testing.T) {
	tb := New(4)
	for h := uint64(1); h <= 4; h++ {
		if tb.Make(h, 100+int64(h), 0) == nil {
			t.Fatalf("record %d refused below the bound", h)
		}
	}
	if tb.Make(5, 200, 50) != nil {
		t.Fatal("a fifth record made in a table bound to 4")
	}
	if tb.Make(1, 101, 50) == nil {
		t.Fatal("a held record refused in a full table")
	}
	if tb.Make(5, 200, 101) == nil {
		t.Fatal("no record made once one window ended")
	}
	if tb.Find(1, 101) != nil {
		t.Fatal("an ended record survived the rebuild that made room")
	}
	if got := tb.Find(2, 102); got == nil {
		t.Fatal("a live record lost in the rebuild")
	}
}

// TestPendingGenerations: an emission index holds within its generation only.
func TestPendingGenerations(t *testing.T) {
	var tb Table
	r := tb.Make(9, 10, 0)
	if _, ok := tb.Pending(r); ok {
		t.Fatal("a new record has an emission")
	}
	tb.SetPending(r, 3)
	if i, ok := tb.Pending(r); !ok || i != 3 {
		t.Fatalf("Pending = %d, %v; want 3, true", i, ok)
	}
	tb.NextGen()
	if _, ok := tb.Pending(r); ok {
		t.Fatal("an emission of the last generation still pending")
	}
}

// BenchmarkMakeFind: a record made and found again, at 1,000,000 live keys.
func BenchmarkMakeFind(b *testing.B) {
	var tb Table
	const keys = 1 << 20
	for i := range uint64(keys) {
		tb.Make(i*0x9e3779b97f4a7c15, 1<<40, 0)
	}
	b.ResetTimer()
	for i := range b.N {
		h := uint64(i&(keys-1)) * 0x9e3779b97f4a7c15
		if r := tb.Make(h, 1<<40, 0); r != nil {
			r.Spent++
		}
	}
	b.ReportMetric(float64(tb.Bytes())/keys, "B/key")
}
