package deferred

import (
	"bytes"
	"testing"
	"time"
)

// FuzzDecode: the decoder never panics, and whatever it accepts encodes
// and decodes to an item that it accepts again, equal in what the drain
// uses.
func FuzzDecode(f *testing.F) {
	h := int64(2)
	good := &Item{V: 1, Ticket: NewTicket(), Domain: "shop", Rule: "shop:user_id", Key: "shop:user_id|user_id=a",
		Descriptors: []Descriptor{{Entries: []Entry{{Key: "user_id", Value: "a"}}, Hits: &h}}, Hits: 1,
		EnqueuedAt: time.Unix(1, 0).UTC(), Deadline: time.Unix(601, 0).UTC(),
		Payload: &Payload{Method: "POST", Path: "/o", Headers: map[string]string{"A": "b"}, Body: "x"}}
	b, _ := Encode(good)
	f.Add(b)
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":1,"ticket":"AAAAAAAAAAAAAAAAAAAAAA","domain":"d","rule":"r","key":"k","descriptors":[{"entries":[{"key":"a","value":"b"}]}],"hits":1,"enqueued_at":"2026-01-01T00:00:00Z","deadline":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, data []byte) {
		it, err := Decode(data)
		if err != nil {
			return
		}
		again, err := Encode(it)
		if err != nil {
			t.Fatalf("accepted item does not encode: %v", err)
		}
		it2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded item refused: %v\n%s", err, again)
		}
		third, _ := Encode(it2)
		if !bytes.Equal(again, third) {
			t.Fatalf("encoding not stable:\n%s\n%s", again, third)
		}
		req := it2.Request(nil)
		if !req.Release || len(req.Descriptors) != len(it.Descriptors) {
			t.Fatalf("request %+v", req)
		}
	})
}
