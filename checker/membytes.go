package checker

import (
	"unsafe"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/heapsize"
)

// The key table's bound in bytes (Config.MaxBytes). Every key carries an
// estimate of the heap it holds, made once when it is created — the
// entry, its place in its shard's map and queues, the strings it copied
// from the request (counter key, values, descriptor text) and the state
// its rule gives it — and the table keeps the running total. A key
// created while the total is over the bound evicts first, as a full
// shard does: the least recently used of a sample of its shard, then, if
// its shard has nothing older to give, of the next shards that are free
// at that instant. Nothing is walked per decision: a decision on a known
// key changes no estimate.

// entryOverhead is what a key costs beyond its own strings and its entry
// with its counter (one allocation): its slot in the shard's map (a swiss table of 8-byte keys and pointers
// at 7/8 load, doubling as it grows: about 40 bytes), and one place in
// each of the shard's queues that may hold it (refresh heap, emission
// wheel, dirty list: 8 bytes each; parked list: 16), with their slack as
// they grow.
var entryOverhead int64 = 40 + 2*(3*8+16)

// minEntryBytes is the least a key costs: its overhead and its entry with
// the smaller counter.
var minEntryBytes = entryOverhead + heapsize.Of(int(unsafe.Sizeof(entry{})+min(unsafe.Sizeof(windowCounter{}), unsafe.Sizeof(bucketCounter{}))))

// entryBytes estimates the heap e holds; ownVals are the bytes of the
// request values it copied (a wildcard rule's shared pattern values are
// the rule's, not the key's).
func entryBytes(e *entry, ownVals []string) int64 {
	n := entryOverhead + heapsize.Of(int(unsafe.Sizeof(entry{}))+e.ctr.size()) + heapsize.Of(len(e.key)) + heapsize.Of(len(e.desc)) + heapsize.Of(len(e.vals)*int(unsafe.Sizeof("")))
	if e.skey != e.key {
		n += heapsize.Of(len(e.skey))
	}
	for _, v := range ownVals {
		n += heapsize.Of(len(v))
	}
	if r := e.rule; r.NearLimit == config.NearAsync || r.Shards > 1 {
		n += heapsize.Of(int(unsafe.Sizeof(extra{}))) // made on first use (bands.go, hot.go)
	}
	return n
}

// maxSteal bounds the other shards one creation tries to evict from when
// its own shard has nothing older to give.
const maxSteal = 8

// makeRoom evicts until need more bytes fit within MaxBytes (requires the
// lock of shard i): the least recently used of its own keys first, then of
// the next shards whose lock is free at this instant (TryLock: shards are
// otherwise locked in ascending order only, so waiting for one here could
// deadlock). Keys used at now may belong to the request being decided and
// are never evicted. If nothing can be evicted the key is created anyway:
// the total exceeds the bound by at most that key until the next creation.
func (c *Checker) makeRoom(i int, need, now int64) {
	if c.cfg.MaxBytes <= 0 {
		return
	}
	over := func() bool { return c.bytes.Load()+need > c.cfg.MaxBytes }
	sh := &c.shards[i]
	for over() && c.evict(sh, now, true) {
	}
	for j := 1; j <= maxSteal && j < len(c.shards) && over(); j++ {
		o := &c.shards[(i+j)&int(c.mask)]
		if o.mu.TryLock() {
			for over() && c.evict(o, now, true) {
			}
			o.mu.Unlock()
		}
	}
}

// tombKeys is how many keys a shard's tombstone table is sized for: the
// keys the shard can hold by count, or by bytes when that is fewer (every
// key takes at least minEntryBytes).
func (c *Checker) tombKeys() int {
	n := c.perShard
	if c.cfg.MaxBytes > 0 {
		n = min(n, int(c.cfg.MaxBytes/int64(len(c.shards))/minEntryBytes)+1)
	}
	return n
}
