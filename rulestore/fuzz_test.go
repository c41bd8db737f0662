package rulestore

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeRecord: a stored record decodes to a version that could have
// been written, or to an error; never a panic. A decoded version encodes
// back to a record that decodes to itself.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range []string{
		`{"domain":"api","version":1,"body":"domain: api\n","time":"2026-12-04T10:00:00Z"}`,
		`{"domain":"api","version":2,"deleted":true,"time":"2026-12-04T10:00:00Z"}`,
		`{"domain":"","version":1,"body":"x"}`,
		`{"domain":"a","version":0,"body":"x"}`,
		`{"domain":"a","version":1,"deleted":true,"body":"x"}`,
		`[1,2]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeRecord(b)
		if err != nil {
			return
		}
		if v.Version < 1 || v.Domain == "" || v.Deleted == (v.Body != "") {
			t.Fatalf("decoded an impossible version: %+v", v)
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		w, err := decodeRecord(again)
		if err != nil || !w.Time.Equal(v.Time) {
			t.Fatalf("round trip: %+v, %v; want %+v", w, err, v)
		}
		w.Time = v.Time
		if w != v {
			t.Fatalf("round trip: %+v; want %+v", w, v)
		}
	})
}

// FuzzDecodeClient: a stored client field either decodes to values that
// encode back to it, or is refused; never a panic.
func FuzzDecodeClient(f *testing.F) {
	f.Add(EncodeClient([]string{"acme"}))
	f.Add(EncodeClient([]string{"a", "b"}))
	f.Add("\x05ab")
	f.Add("\x00")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		vals, err := DecodeClient(s)
		if err != nil {
			return
		}
		if EncodeClient(vals) != s {
			t.Fatalf("%q decodes to %q, which encodes to %q", s, vals, EncodeClient(vals))
		}
		if _, _, _, err := readChange(appendChange(nil, s, "p")); err != nil {
			t.Fatal(err)
		}
	})
}
