package checker

import (
	"unsafe"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/heapsize"
)

// The key table's bound in bytes (MaxBytes): every key carries an
// estimate of its heap made at creation (entry, map and queue places,
// copied strings, its rule's state), the table the total. A key created
// over the bound evicts first, as a full shard does.

// entryOverhead is a key's cost beyond its strings, entry and counter:
// its slot in the shard's map (a swiss table of 8-byte keys and pointers
// at 7/8 load, doubling: about 40 bytes) and a place in each queue that
// may hold it (refresh heap, wheel, dirty list: 8 bytes; parked: 16),
// with their slack as they grow.
var entryOverhead int64 = 40 + 2*(3*8+16)

// minEntryBytes is the least a key costs (with the smaller counter).
var minEntryBytes = entryOverhead + heapsize.Of(int(unsafe.Sizeof(entry{})+min(unsafe.Sizeof(windowCounter{}), unsafe.Sizeof(bucketCounter{}))))

// entryBytes estimates the heap e holds; ownVals are the values it copied
// (a shared wildcard's pattern is the rule's).
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

// maxSteal bounds the other shards one creation evicts from.
const maxSteal = 8

// makeRoom evicts until need more bytes fit within MaxBytes (requires
// shard i's lock): its own least recently used keys, then the next shards'
// whose lock is free (waiting out of order could deadlock), never one used
// at now (the request's own); else the key exceeds the bound a while.
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

// tombKeys is the keys a shard's tombstone table is sized for: what it
// can hold by count, or by bytes when fewer.
func (c *Checker) tombKeys() int {
	n := c.perShard
	if c.cfg.MaxBytes > 0 {
		n = min(n, int(c.cfg.MaxBytes/int64(len(c.shards))/minEntryBytes)+1)
	}
	return n
}
