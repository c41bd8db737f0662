package counters

// MaxMemEntries bounds each of MemStore's tables of deferred requests
// (ticket states, request-id claims): past it the oldest entries go
// first, before their expiry. Redis holds these until they expire; the
// in-memory store of `velvetrope dev` must not grow with every deferred
// request of the retention (24 hours by default).
const MaxMemEntries = 1 << 18

// memTable is a table of entries that expire, bounded in count: expired
// entries go in a sweep once the writes since the last one reach 1,024
// or half the table (memory follows the live entries without a timer, at
// most two entries looked at per write), and past max entries the oldest
// written first go. Not safe for concurrent use: its owner locks.
type memTable[V any] struct {
	m    map[string]memEntry[V]
	fifo []memRef // ids in the order first written, for eviction
	seq  uint64
	puts int // writes since the last sweep
	max  int // 0: MaxMemEntries
}

type memEntry[V any] struct {
	v   V
	exp int64 // unix ns
	seq uint64
}

type memRef struct {
	id  string
	seq uint64
}

// get returns id's value if it is there and not expired at now.
func (t *memTable[V]) get(id string, now int64) (V, bool) {
	e, ok := t.m[id]
	if !ok || e.exp <= now {
		var zero V
		return zero, false
	}
	return e.v, true
}

// put stores v under id until exp.
func (t *memTable[V]) put(id string, v V, exp, now int64) {
	if t.m == nil {
		t.m = map[string]memEntry[V]{}
	}
	if t.puts++; t.puts >= max(1024, len(t.m)/2) {
		t.puts = 0
		for k, e := range t.m {
			if e.exp <= now {
				delete(t.m, k)
			}
		}
	}
	e, ok := t.m[id]
	if !ok || e.exp <= now {
		t.seq++
		e.seq = t.seq
		t.fifo = append(t.fifo, memRef{id, e.seq})
	}
	e.v, e.exp = v, exp
	t.m[id] = e
	limit := t.max
	if limit <= 0 {
		limit = MaxMemEntries
	}
	for len(t.m) > limit && len(t.fifo) > 0 {
		ref := t.fifo[0]
		t.fifo = t.fifo[1:]
		if cur, ok := t.m[ref.id]; ok && cur.seq == ref.seq {
			delete(t.m, ref.id)
		}
	}
	// references to entries swept or replaced since: dropped once they
	// are most of the queue, so it stays within twice the table
	if len(t.fifo) > 2*len(t.m)+1024 {
		live := make([]memRef, 0, len(t.m))
		for _, ref := range t.fifo {
			if cur, ok := t.m[ref.id]; ok && cur.seq == ref.seq {
				live = append(live, ref)
			}
		}
		t.fifo = live
	}
}

// del removes id.
func (t *memTable[V]) del(id string) { delete(t.m, id) }

// len is the entries held (expired ones not yet swept included).
func (t *memTable[V]) len() int { return len(t.m) }
