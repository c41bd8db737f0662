package counters

import (
	"context"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
)

// TestControlStore: the control store contract, on memory, Redis and the
// cluster alike: versions move with every change, an unchanged version
// reads nothing, expired controls are dropped, deletes report.
func TestControlStore(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		cs := s.(ControlStore)
		t.Run(name, func(t *testing.T) {
			v0, list, err := cs.Controls(ctx, -1, w0)
			if err != nil || len(list) != 0 {
				t.Fatalf("empty store: %v %v", list, err)
			}
			deny := Control{ID: "a1", Domain: "api", Entries: []config.Entry{{Key: "ip", Value: "10.0.0.1"}},
				Action: ActionDeny, CreatedAt: w0}
			brief := Control{ID: "b2", Domain: "api", Entries: []config.Entry{{Key: "user", Value: "priya"}},
				Action: ActionAllow, CreatedAt: w0, ExpiresAt: w0 + int64(time.Minute)}
			for _, c := range []Control{deny, brief} {
				if err := cs.PutControl(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			v1, list, err := cs.Controls(ctx, v0, w0)
			if err != nil || v1 == v0 || len(list) != 2 || list[0].ID != "a1" || list[1].Entries[0].Value != "priya" {
				t.Fatalf("after two puts: v%d→v%d %+v %v", v0, v1, list, err)
			}
			if v, list, err := cs.Controls(ctx, v1, w0); err != nil || v != v1 || list != nil {
				t.Fatalf("unchanged version must read nothing: v%d %v %v", v, list, err)
			}
			// One minute later the allow has expired: dropped from the store.
			v2, list, err := cs.Controls(ctx, -1, w0+int64(time.Minute))
			if err != nil || len(list) != 1 || list[0].ID != "a1" {
				t.Fatalf("after expiry: %+v %v", list, err)
			}
			if v3, list, _ := cs.Controls(ctx, -1, w0); len(list) != 1 || v3 < v2 {
				t.Fatalf("the expired control must be gone for good: v%d %+v", v3, list)
			}
			if ok, err := cs.DeleteControl(ctx, "a1"); err != nil || !ok {
				t.Fatalf("delete: %v %v", ok, err)
			}
			if ok, err := cs.DeleteControl(ctx, "a1"); err != nil || ok {
				t.Fatalf("second delete: %v %v", ok, err)
			}
			if _, list, _ := cs.Controls(ctx, -1, w0); len(list) != 0 {
				t.Fatalf("after delete: %+v", list)
			}
		})
	}
}

// TestKeyLayout pins the documented key layout (package doc): the hash
// tag is FNV-1a 64 of the counter key in hex.
func TestKeyLayout(t *testing.T) {
	r := NewRedis(nil, "vr", 0)
	h := fnv.New64a()
	h.Write([]byte("api:user_id/priya"))
	tag := "vr:{" + strconv.FormatUint(h.Sum64(), 16) + "}:api:user_id/priya"
	for got, want := range map[string]string{
		r.WindowKey("api:user_id/priya", 1700000000000000000): tag + ":w:1700000000000000000",
		r.BucketKey("api:user_id/priya"):                      tag + ":b",
		r.base("api:user_id/priya"):                           tag,
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
