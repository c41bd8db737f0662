package ratelimit

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
)

// A lease id names the counter key of its concurrency rule and 128 random
// bits: any checker can release it, and nobody can release a lease whose
// id they were not given.

// ErrBadLease is a lease id no checker could have issued.
var ErrBadLease = errors.New("not a lease id")

// NewLease returns a fresh lease id of counter key.
func NewLease(key string) string {
	var r [16]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand)
	enc := base64.RawURLEncoding
	b := make([]byte, 0, enc.EncodedLen(len(key))+1+enc.EncodedLen(len(r)))
	b = enc.AppendEncode(b, []byte(key))
	b = append(b, '.')
	return string(enc.AppendEncode(b, r[:]))
}

// ParseLease returns the counter key lease names, or ErrBadLease (also
// for a spelling NewLease never writes).
func ParseLease(lease string) (key string, err error) {
	k, r, ok := strings.Cut(lease, ".")
	enc := base64.RawURLEncoding.Strict() // one spelling per lease
	if !ok || len(r) != enc.EncodedLen(16) || !urlAlphabet(k) || !urlAlphabet(r) {
		return "", ErrBadLease
	}
	if _, err := enc.DecodeString(r); err != nil {
		return "", ErrBadLease
	}
	b, err := enc.DecodeString(k)
	if err != nil || len(b) == 0 {
		return "", ErrBadLease
	}
	return string(b), nil
}

// urlAlphabet says s holds only base64url characters (the decoder skips
// line breaks, which would give one lease several spellings).
func urlAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
