package ratelimit

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestLeaseRoundTrip: a lease names its counter key; two leases of one
// key differ; what is not a lease is refused.
func TestLeaseRoundTrip(t *testing.T) {
	for _, key := range []string{"api:tenant|tenant=acme", "a:b|k=\\|.x", strings.Repeat("v", 5000)} {
		a, b := NewLease(key), NewLease(key)
		if a == b {
			t.Fatal("two leases alike")
		}
		got, err := ParseLease(a)
		if err != nil || got != key {
			t.Fatalf("ParseLease(%q) = %q, %v", a, got, err)
		}
	}
	for _, bad := range []string{"", ".", "a.", ".AAAAAAAAAAAAAAAAAAAAAA", "YQ.short", "YQ.AAAAAAAAAAAAAAAAAAAAA!", "Y!.AAAAAAAAAAAAAAAAAAAAAA"} {
		if _, err := ParseLease(bad); err != ErrBadLease {
			t.Errorf("ParseLease(%q): %v", bad, err)
		}
	}
}

// FuzzParseLease: any text is refused or names a key that encodes back
// to its first part.
func FuzzParseLease(f *testing.F) {
	f.Add(NewLease("api:tenant|tenant=acme"))
	f.Add("YQ.AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("..")
	f.Fuzz(func(t *testing.T, s string) {
		key, err := ParseLease(s)
		if err != nil {
			return
		}
		k, _, _ := strings.Cut(s, ".")
		if key == "" || base64.RawURLEncoding.EncodeToString([]byte(key)) != k {
			t.Fatalf("ParseLease(%q) = %q", s, key)
		}
	})
}
