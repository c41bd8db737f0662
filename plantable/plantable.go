// Package plantable holds a checker's copy of the rules store's client
// tables (docs/rules.md, "Per-client limits"): per client, the number of
// its plan. A client is kept as a 64-bit keyed hash of its values and a
// 16-bit plan number, 10 bytes a place with no pointer in it (the
// collector never scans the table), so ten million clients take about
// 180 MB at the tables' usual load.
//
// Readers never lock: the table is 4096 shards, each an immutable array
// published by an atomic pointer. A writer (one at a time) copies the
// shards a batch of changes touches and publishes the copies; a shard is
// 1/4096 of the table, so a one-client change copies a few KiB. A table
// being filled before it is published is written in place.
//
// Two clients whose values hash alike (odds about n²/2⁶⁵ for n clients:
// 3·10⁻⁶ at ten million) share a place, and the later one's plan; the
// hash is keyed per process, so no client can choose its values to land
// on another's.
package plantable

import (
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
)

const (
	shardBits  = 12
	shardCount = 1 << shardBits
	minPlaces  = 8
	// PlaceBytes is what one place of a shard takes.
	PlaceBytes = 8 + 2
	// MaxPlans bounds the distinct plan names one table holds.
	MaxPlans = 1 << 16
)

// shard is an open-addressing set of (hash, plan) with linear probing;
// a zero hash marks a free place.
type shard struct {
	keys  []uint64
	plans []uint16
	n     int
}

// Change sets one client's plan; Plan "" removes the client.
type Change struct {
	Key  uint64 // the client's Key
	Plan string
}

// Table maps clients to plan numbers. Safe for concurrent use: any
// number of readers and one writer at a time.
type Table struct {
	seed   maphash.Seed
	shards [shardCount]atomic.Pointer[shard]
	names  atomic.Pointer[[]string] // plan number → name

	mu     sync.Mutex // writers
	ids    map[string]uint16
	public bool // published: writes copy the shards they touch
	n      atomic.Int64
	places atomic.Int64
}

// New returns an empty table, written in place until Publish.
func New() *Table {
	t := &Table{seed: maphash.MakeSeed(), ids: map[string]uint16{}}
	t.names.Store(&[]string{})
	return t
}

// Start is the hash of a client before its first value; Add adds the
// next value. A client of values v1…vn has the Key
// Finish(Add(…Add(Start(), v1)…, vn)). Each value is hashed whole, so
// no value can stand for two (no separator to smuggle).
func (t *Table) Start() uint64 { return 0x9e3779b97f4a7c15 }

// Add adds one value to a client's hash.
func (t *Table) Add(h uint64, v string) uint64 {
	return (h^maphash.String(t.seed, v))*0xff51afd7ed558ccd + 0x2545f4914f6cdd1d
}

// Finish makes a hash a Key (never 0, the mark of a free place).
func Finish(h uint64) uint64 {
	h ^= h >> 33
	if h == 0 {
		return 1
	}
	return h
}

// Key is the Key of a client of the given values.
func (t *Table) Key(values []string) uint64 {
	h := t.Start()
	for _, v := range values {
		h = t.Add(h, v)
	}
	return Finish(h)
}

// Lookup returns the plan number of the client of Key k. It allocates
// nothing and takes no lock.
func (t *Table) Lookup(k uint64) (uint16, bool) {
	s := t.shards[k>>(64-shardBits)].Load()
	if s == nil {
		return 0, false
	}
	mask := uint64(len(s.keys) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		switch s.keys[i] {
		case k:
			return s.plans[i], true
		case 0:
			return 0, false
		}
	}
}

// Names returns the plan names by number. The slice is never changed.
func (t *Table) Names() []string { return *t.names.Load() }

// Plan returns the plan name of the client of Key k.
func (t *Table) Plan(k uint64) (string, bool) {
	p, ok := t.Lookup(k)
	if !ok {
		return "", false
	}
	names := t.Names()
	if int(p) >= len(names) {
		return "", false
	}
	return names[p], true
}

// Len is the clients held.
func (t *Table) Len() int64 { return t.n.Load() }

// Bytes is the memory the table's places take.
func (t *Table) Bytes() int64 { return t.places.Load() * PlaceBytes }

// Publish ends in-place writing: from now on a write copies what it
// changes, for readers that may hold the table.
func (t *Table) Publish() {
	t.mu.Lock()
	t.public = true
	t.mu.Unlock()
}

// Apply makes changes, in order (a later change of a client wins). A new
// plan name is numbered before any client gets it, so a reader never
// finds a number it cannot name. It fails, changing nothing, when the
// table would name more than MaxPlans plans.
func (t *Table) Apply(changes []Change) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var added []string
	for i := range changes {
		if p := changes[i].Plan; p != "" {
			if _, ok := t.ids[p]; !ok && !slices.Contains(added, p) {
				added = append(added, p)
			}
		}
	}
	names := t.Names()
	if len(names)+len(added) > MaxPlans {
		return fmt.Errorf("plantable: %d plan names, more than %d", len(names)+len(added), MaxPlans)
	}
	if len(added) > 0 {
		next := append(slices.Clip(names), added...)
		for i, p := range added {
			t.ids[p] = uint16(len(names) + i)
		}
		t.names.Store(&next)
	}
	if len(changes) == 0 {
		return nil
	}
	// by shard, keeping each shard's changes in their order
	order := make([]int32, len(changes))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		return int(changes[a].Key>>(64-shardBits)) - int(changes[b].Key>>(64-shardBits))
	})
	for lo := 0; lo < len(order); {
		si := changes[order[lo]].Key >> (64 - shardBits)
		hi := lo
		for hi < len(order) && changes[order[hi]].Key>>(64-shardBits) == si {
			hi++
		}
		t.applyShard(int(si), changes, order[lo:hi])
		lo = hi
	}
	return nil
}

// applyShard applies one shard's changes to a copy (or, unpublished, in
// place) and publishes it.
func (t *Table) applyShard(si int, changes []Change, idx []int32) {
	old := t.shards[si].Load()
	var s *shard
	switch {
	case old == nil:
		s = &shard{keys: make([]uint64, minPlaces), plans: make([]uint16, minPlaces)}
		t.places.Add(minPlaces)
	case t.public:
		s = &shard{keys: slices.Clone(old.keys), plans: slices.Clone(old.plans), n: old.n}
	default:
		s = old
	}
	before := s.n
	for _, i := range idx {
		c := &changes[i]
		k := c.Key
		if k == 0 {
			k = 1
		}
		if c.Plan == "" {
			s.remove(k)
			continue
		}
		if 4*(s.n+1) > 3*len(s.keys) { // keep a quarter free: probes stay short
			t.places.Add(int64(len(s.keys)))
			s.resize(2 * len(s.keys))
		}
		s.put(k, t.ids[c.Plan])
	}
	if 8*s.n < len(s.keys) && len(s.keys) > minPlaces { // mostly removed: give the memory back
		size := minPlaces
		for 2*s.n >= size {
			size *= 2
		}
		t.places.Add(int64(size - len(s.keys)))
		s.resize(size)
	}
	t.n.Add(int64(s.n - before))
	t.shards[si].Store(s)
}

func (s *shard) put(k uint64, plan uint16) {
	mask := uint64(len(s.keys) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		switch s.keys[i] {
		case k:
			s.plans[i] = plan
			return
		case 0:
			s.keys[i], s.plans[i] = k, plan
			s.n++
			return
		}
	}
}

// remove deletes k, shifting the records after it back so that no probe
// sequence is broken by a hole.
func (s *shard) remove(k uint64) {
	mask := uint64(len(s.keys) - 1)
	i := k & mask
	for ; s.keys[i] != k; i = (i + 1) & mask {
		if s.keys[i] == 0 {
			return
		}
	}
	s.n--
	for j := i; ; {
		j = (j + 1) & mask
		if s.keys[j] == 0 {
			break
		}
		home := s.keys[j] & mask
		// the record at j may move to the hole at i unless its home lies
		// cyclically in (i, j]
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.keys[i], s.plans[i] = s.keys[j], s.plans[j]
			i = j
		}
	}
	s.keys[i], s.plans[i] = 0, 0
}

func (s *shard) resize(size int) {
	keys, plans := s.keys, s.plans
	s.keys, s.plans, s.n = make([]uint64, size), make([]uint16, size), 0
	for i, k := range keys {
		if k != 0 {
			s.put(k, plans[i])
		}
	}
}
