// Package tombs remembers, in memory fixed when it is made, until when
// evicted counter keys were over their limits: a key evicted while over
// and created again starts over, not with a fresh budget. Keys go by their
// 64-bit hash into two slots each; a key reads the earlier of its two, so
// a collision restricts a fresh key only when both of its slots are taken
// by later ones — erring on the side of a refusal that ends by itself.
package tombs

// Table is a tombstone table; the zero Table (nil) holds nothing.
type Table []int64

// New returns a table sized for keys (a power of two, at least 64 slots).
func New(keys int) Table {
	n := 64
	for n < keys {
		n <<= 1
	}
	return make(Table, n)
}

// slots picks the two slots of h.
func (t Table) slots(h uint64) (int, int) {
	m := uint64(len(t) - 1)
	return int((h >> 17) & m), int((h >> 41) & m)
}

// Mark records that the key of hash h is over until until (unix ns).
func (t Table) Mark(h uint64, until int64) {
	i, j := t.slots(h)
	t[i], t[j] = max(t[i], until), max(t[j], until)
}

// Until is when the key of hash h stops being over, as far as the table
// knows (0: nothing known).
func (t Table) Until(h uint64) int64 {
	if len(t) == 0 {
		return 0
	}
	i, j := t.slots(h)
	return min(t[i], t[j])
}

// Forget clears what the table knows of the key of hash h (an operator
// reset it), and of any key sharing its slots.
func (t Table) Forget(h uint64) {
	if len(t) > 0 {
		i, j := t.slots(h)
		t[i], t[j] = 0, 0
	}
}
