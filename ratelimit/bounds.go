package ratelimit

import (
	"fmt"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/events"
)

// Bounds limit the size of one request. Every surface (HTTP, gRPC, the
// middleware) reaches an engine through the async checker's Check
// (package checker) or the exact engine's (package local), which enforce
// them, so no accepted request can make a
// delta larger than the pipeline carries ([events.MaxRecordBytes]) or a
// decision arbitrarily expensive. Zero fields take [DefaultBounds].
type Bounds struct {
	MaxDescriptors    int // descriptors per request (16; at most MaxDescriptors)
	MaxEntries        int // entries per descriptor (8; at most MaxEntries)
	MaxKeyBytes       int // bytes of one entry's key (128)
	MaxValueBytes     int // bytes of one entry's value (1024)
	MaxRequestIDBytes int // bytes of a request id (128)
}

// DefaultBounds are generous for real traffic (an IPv6 address is 39
// bytes, a JWT subject rarely above 100, a route path rarely above 500)
// and keep the largest delta near 19 KiB.
func DefaultBounds() Bounds {
	return Bounds{MaxDescriptors: 16, MaxEntries: 8, MaxKeyBytes: 128, MaxValueBytes: 1024, MaxRequestIDBytes: 128}
}

// maxDescriptorBytes is the most the entries of one descriptor may take
// in total ([config.MaxDescriptorBytes]).
const maxDescriptorBytes = config.MaxDescriptorBytes

// WithDefaults returns b with zero fields set to the defaults.
func (b Bounds) WithDefaults() Bounds {
	d := DefaultBounds()
	set := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set(&b.MaxDescriptors, d.MaxDescriptors)
	set(&b.MaxEntries, d.MaxEntries)
	set(&b.MaxKeyBytes, d.MaxKeyBytes)
	set(&b.MaxValueBytes, d.MaxValueBytes)
	set(&b.MaxRequestIDBytes, d.MaxRequestIDBytes)
	return b
}

// Validate reports bounds that are out of range or that would let a
// request produce a delta the pipeline refuses.
func (b Bounds) Validate() error {
	switch {
	case b.MaxDescriptors < 1 || b.MaxDescriptors > MaxDescriptors:
		return fmt.Errorf("max_descriptors: must be within 1..%d, got %d", MaxDescriptors, b.MaxDescriptors)
	case b.MaxEntries < 1 || b.MaxEntries > MaxEntries:
		return fmt.Errorf("max_entries: must be within 1..%d, got %d", MaxEntries, b.MaxEntries)
	case b.MaxKeyBytes < 1:
		return fmt.Errorf("max_key_bytes: must be > 0, got %d", b.MaxKeyBytes)
	case b.MaxValueBytes < 1:
		return fmt.Errorf("max_value_bytes: must be > 0, got %d", b.MaxValueBytes)
	case b.MaxRequestIDBytes < 1 || b.MaxRequestIDBytes > 1024:
		return fmt.Errorf("max_request_id_bytes: must be within 1..1024, got %d", b.MaxRequestIDBytes)
	case b.MaxEntries*(b.MaxKeyBytes+b.MaxValueBytes+2) > maxDescriptorBytes:
		return fmt.Errorf("max_entries × (max_key_bytes + max_value_bytes) = %d bytes: above %d, a delta would not fit the %d-byte record bound",
			b.MaxEntries*(b.MaxKeyBytes+b.MaxValueBytes), maxDescriptorBytes, events.MaxRecordBytes)
	}
	return nil
}

// CheckEntries reports the first entry of descriptor i outside b (too
// many entries, an empty key, a key or value too long or not UTF-8), as a
// *FieldError
// naming it. API layers call it before they build anything from the
// entries; the checker calls it on every request.
func (b *Bounds) CheckEntries(i int, es []config.Entry) error {
	if len(es) > b.MaxEntries {
		return &FieldError{fieldName(i, -1, "entries"), fmt.Errorf("%w: more than %d entries (got %d)", ErrBadRequest, b.MaxEntries, len(es))}
	}
	for j := range es {
		e := &es[j]
		switch {
		case e.Key == "":
			return &FieldError{fieldName(i, j, "key"), fmt.Errorf("%w: must not be empty", ErrBadRequest)}
		case len(e.Key) > b.MaxKeyBytes:
			return &FieldError{fieldName(i, j, "key"), fmt.Errorf("%w: longer than %d bytes (got %d)", ErrBadRequest, b.MaxKeyBytes, len(e.Key))}
		case len(e.Value) > b.MaxValueBytes:
			return &FieldError{fieldName(i, j, "value"), fmt.Errorf("%w: longer than %d bytes (got %d)", ErrBadRequest, b.MaxValueBytes, len(e.Value))}
		case !validUTF8(e.Key):
			return &FieldError{fieldName(i, j, "key"), fmt.Errorf("%w: not valid UTF-8", ErrBadRequest)}
		case !validUTF8(e.Value):
			return &FieldError{fieldName(i, j, "value"), fmt.Errorf("%w: not valid UTF-8", ErrBadRequest)}
		}
	}
	return nil
}

// validUTF8 is utf8.ValidString with a byte loop in front: descriptor
// values are short and nearly always ASCII, and the profile of the request
// path showed the general function's setup costing more than the check.
func validUTF8(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 { // eight bytes at a time: any high bit?
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if w&0x8080808080808080 != 0 {
			return utf8.ValidString(s[i:])
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return utf8.ValidString(s[i:])
		}
	}
	return true
}

// fieldName names descriptors[i].entries[j].leaf (j < 0: descriptors[i].leaf).
func fieldName(i, j int, leaf string) string {
	if j < 0 {
		return fmt.Sprintf("descriptors[%d].%s", i, leaf)
	}
	return fmt.Sprintf("descriptors[%d].entries[%d].%s", i, j, leaf)
}
