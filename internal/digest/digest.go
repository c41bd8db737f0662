// Package digest names keys by a 128-bit digest: two 64-bit hashes under
// seeds drawn when a Digester is made. A key costs the same few bytes
// whatever it holds, and nobody outside the process knows the seeds, so
// no collision can be aimed for (a chance one takes about 2^64 keys).
// The checker keys its `mode: local` counters in the in-process limiter
// by the digest of their counter keys.
package digest

import (
	"encoding/binary"
	"hash/maphash"
)

// Size is a digest's length in bytes.
const Size = 16

// Digester digests keys under its seeds; every digest of one key by one
// Digester is the same.
type Digester [2]maphash.Seed

// New returns a Digester with fresh seeds.
func New() Digester { return Digester{maphash.MakeSeed(), maphash.MakeSeed()} }

// Append appends key's digest to buf. key may alias buf's spare capacity:
// it is read before anything is written.
func (d Digester) Append(buf, key []byte) []byte {
	var out [Size]byte
	binary.LittleEndian.PutUint64(out[:8], maphash.Bytes(d[0], key))
	binary.LittleEndian.PutUint64(out[8:], maphash.Bytes(d[1], key))
	return append(buf, out[:]...)
}

// String is key's digest as a string.
func (d Digester) String(key string) string { return string(d.Append(nil, []byte(key))) }
