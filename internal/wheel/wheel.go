// Package wheel is a timing wheel of references: each waits in the place
// of the tick it is due at (the tick modulo the wheel's size), and a turn
// visits one place. A reference may go stale before its turn (its item
// moved elsewhere): the caller says so when visited, and it is dropped —
// never searched for. The key table holds its lazy keys, those whose
// emission may wait, in one per shard. Not safe for concurrent use.
package wheel

// Wheel is a timing wheel; its zero value has no places until the first
// Add.
type Wheel[T any] struct{ places [][]T }

// Add queues v for tick, in a wheel of size places (made on the first
// Add; ticks within size of each other have places of their own).
func (w *Wheel[T]) Add(v T, tick int64, size int) {
	if w.places == nil {
		w.places = make([][]T, size)
	}
	i := w.place(tick)
	w.places[i] = append(w.places[i], v)
}

// Same reports whether ticks a and b share a place.
func (w *Wheel[T]) Same(a, b int64) bool { return w.place(a) == w.place(b) }

// Turn visits the references in tick t's place, in the order queued;
// those keep says stay for a later turn, the others leave.
func (w *Wheel[T]) Turn(t int64, keep func(v T) bool) {
	if w.places == nil {
		return
	}
	i := w.place(t)
	refs, kept := w.places[i], 0
	for _, v := range refs {
		if keep(v) {
			refs[kept] = v
			kept++
		}
	}
	clear(refs[kept:])
	w.places[i] = refs[:kept]
}

func (w *Wheel[T]) place(tick int64) int {
	n := int64(len(w.places))
	if n == 0 {
		return 0
	}
	return int((tick%n + n) % n)
}
