package ratelimit

import (
	"testing"
	"unicode/utf8"
)

// FuzzValidUTF8: the fast check agrees with utf8.ValidString on any input.
func FuzzValidUTF8(f *testing.F) {
	for _, s := range []string{"", "priya", "10.0.0.1-and-more", "ünïcode", "\xff", "abcdefgh\xfe", "abcdefghijklmnop\xc3\xa9", "abc\xe9", "abcd\xe9", "ab\xc3\xa9", "abcdefghijk\xc3\xa9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validUTF8(s), utf8.ValidString(s); got != want {
			t.Fatalf("validUTF8(%q) = %v, want %v", s, got, want)
		}
	})
}
