package ratelimit

import (
	"fmt"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/config"
)

// CheckEntries reports the first entry of descriptor i outside b (too
// many entries, an empty key, a key or value too long or not UTF-8), as a
// *[FieldError] naming it. API layers call it before they build anything
// from the entries; both engines call it on every request
// ([Request.ValidateBounds]).
func CheckEntries(b *config.LimitsConfig, i int, es []config.Entry) error {
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
	if i+4 <= len(s) { // a short value's head four at a time too
		if w := uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24; w&0x80808080 != 0 {
			return utf8.ValidString(s[i:])
		}
		i += 4
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
