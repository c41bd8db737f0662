// Package stampq is a first-in first-out queue of references, each
// stamped with a time when queued (stamps in roughly ascending order),
// whose items may change before their turn: a reference whose item was
// used again or removed since is stale, skipped when its turn comes, and
// dropped early once stale references are most of the queue, so that a
// removed item does not stay reachable until its turn. The key table
// queues its parked keys in one, for their idle eviction without a place
// in the refresh heap. Not safe for concurrent use.
package stampq

// Queue is a stamped FIFO; its zero value is empty and ready.
type Queue[T any] struct {
	refs  []ref[T]
	head  int // refs before it are taken
	stale int // references known to be stale (Staled), not yet dropped
}

type ref[T any] struct {
	v  T
	at int64
}

// compactAt is the fewest stale (or taken) places worth a compaction.
const compactAt = 64

// Push queues v stamped at.
func (q *Queue[T]) Push(v T, at int64) { q.refs = append(q.refs, ref[T]{v, at}) }

// Staled records that one queued reference went stale.
func (q *Queue[T]) Staled() { q.stale++ }

// Len is the references queued, stale ones included.
func (q *Queue[T]) Len() int { return len(q.refs) - q.head }

// Drain visits, oldest first, the references queued when it is called
// and stamped before before. current says whether a reference is still
// current (stale ones are dropped, uncounted); take whether a current
// one leaves the queue — false queues it again at the end, for a later
// Drain (visiting it again in this one could spin forever).
func (q *Queue[T]) Drain(before int64, current func(v T, at int64) bool, take func(v T) bool) {
	var zero ref[T]
	for end := len(q.refs); q.head < end && q.refs[q.head].at < before; {
		r := q.refs[q.head]
		q.refs[q.head] = zero
		q.head++
		switch {
		case !current(r.v, r.at):
			q.stale = max(0, q.stale-1)
		case !take(r.v):
			q.refs = append(q.refs, r)
		}
	}
	if live := q.Len(); q.stale > compactAt && q.stale*2 > live {
		kept := q.refs[:0]
		for _, r := range q.refs[q.head:] {
			if current(r.v, r.at) {
				kept = append(kept, r)
			}
		}
		clear(q.refs[len(kept):])
		q.refs, q.head, q.stale = kept, 0, 0
	}
	if q.head > compactAt && q.head*2 > len(q.refs) {
		n := copy(q.refs, q.refs[q.head:])
		clear(q.refs[n:])
		q.refs, q.head = q.refs[:n], 0
	}
}
