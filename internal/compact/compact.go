// Package compact holds the keys a checker has only decided on their
// first-touch allowance: per 64-bit counter hash, the end of the window
// and the hits spent in it, 32 bytes a record with no pointer in it (the
// collector never scans the table). A per-IP front sees most keys a few
// times; a record is what such a key costs until it needs a store call.
//
// The table is open addressing with linear probing. A record whose window
// has ended is free: it is overwritten by its own hash, and dropped when
// the table is rebuilt (when live and ended records fill three quarters
// of it). Two keys of one hash share a record: the one spends what both
// did, an error on the side of fewer admissions from memory.
package compact

import (
	"math"
	"math/bits"
	"unsafe"
)

// Rec is one key's record in one window. A pointer to it stays valid
// until the next Make or Remove on its table.
type Rec struct {
	hash  uint64 // 0: an empty place
	until int64  // end of the window (unix ns)
	// Spent is the hits this instance took from the allowance in the
	// window, Own the part of them its callers were answered for (the
	// rest wait for their request's other descriptors).
	Spent, Own uint32
	pend, gen  uint32 // 1 + the index of its emission of generation gen
}

// Table is one key-table shard's records; not safe for concurrent use.
// The zero Table is empty and grows on first Make.
type Table struct {
	recs  []Rec
	used  int   // places taken, by live and ended records
	live  int   // records made or reset and not removed, ended ones included until a rebuild
	max   int   // records at most (0: no bound)
	ends  int64 // no record's window ends before (a full table frees nothing sooner)
	shift uint8
	gen   uint32
}

// New returns a table that holds at most max records (0: no bound).
func New(max int) Table { return Table{max: max} }

// RecBytes is the size of a record.
const RecBytes = int(unsafe.Sizeof(Rec{}))

const minPlaces = 16

// Len is the records held (ended ones included until the next rebuild).
func (t *Table) Len() int { return t.live }

// Bytes is the memory the table's places take.
func (t *Table) Bytes() int64 { return int64(len(t.recs) * RecBytes) }

func nonzero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

func (t *Table) home(h uint64) int { return int((h * 0x9e3779b97f4a7c15) >> t.shift) }

// find is h's place, or -1.
func (t *Table) find(h uint64) int {
	if len(t.recs) == 0 {
		return -1
	}
	m := len(t.recs) - 1
	for i := t.home(h); ; i = (i + 1) & m {
		switch t.recs[i].hash {
		case h:
			return i
		case 0:
			return -1
		}
	}
}

// Find is h's record of the window ending at until, or nil.
func (t *Table) Find(h uint64, until int64) *Rec {
	h = nonzero(h)
	if i := t.find(h); i >= 0 && t.recs[i].until == until {
		return &t.recs[i]
	}
	return nil
}

// Make is h's record of the window ending at until: the one held, or a
// new one with nothing spent (a record of an earlier window starts
// over); nil when the table holds its most records live at now, or a
// record of a later window (a clock behind it must not spend that
// window's allowance again).
func (t *Table) Make(h uint64, until, now int64) *Rec {
	h = nonzero(h)
	if i := t.find(h); i >= 0 {
		r := &t.recs[i]
		switch {
		case r.until > until:
			return nil
		case r.until < until:
			*r = Rec{hash: h, until: until}
		}
		return r
	}
	if t.max > 0 && t.live >= t.max && (now < t.ends || !t.rebuild(now)) {
		return nil // full until a record's window ends
	}
	if (t.used+1)*4 > len(t.recs)*3 && !t.rebuild(now) {
		return nil
	}
	m := len(t.recs) - 1
	i := t.home(h)
	for t.recs[i].hash != 0 {
		i = (i + 1) & m
	}
	t.recs[i] = Rec{hash: h, until: until}
	t.used++
	t.live++
	t.ends = min(t.ends, until)
	return &t.recs[i]
}

// rebuild drops the records ended at now into a table with room for
// twice the live ones; false: at most records live, nothing changed.
func (t *Table) rebuild(now int64) bool {
	live, ends := 0, int64(math.MaxInt64)
	for i := range t.recs {
		if r := &t.recs[i]; r.hash != 0 && r.until > now {
			live++
			ends = min(ends, r.until)
		}
	}
	t.ends = ends
	if t.max > 0 && live >= t.max {
		return false
	}
	n := minPlaces
	for n < 2*(live+1) {
		n <<= 1
	}
	old := t.recs
	t.recs, t.used, t.live = make([]Rec, n), 0, 0
	t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	m := n - 1
	for k := range old {
		r := &old[k]
		if r.hash == 0 || r.until <= now {
			continue
		}
		i := t.home(r.hash)
		for t.recs[i].hash != 0 {
			i = (i + 1) & m
		}
		t.recs[i] = *r
		t.used++
		t.live++
	}
	return true
}

// Take removes h's record, whatever its window, returning it (ok: there
// was one).
func (t *Table) Take(h uint64) (r Rec, ok bool) {
	i := t.find(nonzero(h))
	if i < 0 {
		return Rec{}, false
	}
	r = t.recs[i]
	t.Remove(h)
	return r, true
}

// Until is the end of r's window.
func (r *Rec) Until() int64 { return r.until }

// Remove takes h's record out of the table, if it holds one, moving the
// records after it back so that every probe still reaches its own.
func (t *Table) Remove(h uint64) {
	i := t.find(nonzero(h))
	if i < 0 {
		return
	}
	m := len(t.recs) - 1
	t.recs[i] = Rec{}
	t.used--
	t.live--
	for j := (i + 1) & m; t.recs[j].hash != 0; j = (j + 1) & m {
		// the record at j may move to the hole at i unless its home lies
		// cyclically within (i, j]
		if h := t.home(t.recs[j].hash); (j-h)&m >= (j-i)&m {
			t.recs[i], t.recs[j] = t.recs[j], Rec{}
			i = j
		}
	}
}

// Pending is the index of r's emission in the current generation.
func (t *Table) Pending(r *Rec) (int, bool) {
	if r.pend == 0 || r.gen != t.gen {
		return 0, false
	}
	return int(r.pend - 1), true
}

// SetPending records that r's emission of the current generation is at
// index i.
func (t *Table) SetPending(r *Rec, i int) { r.pend, r.gen = uint32(i+1), t.gen }

// NextGen starts a generation: the emissions of the last one went.
func (t *Table) NextGen() { t.gen++ }
