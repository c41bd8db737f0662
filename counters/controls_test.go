package counters

import (
	"context"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/limiter"
)

// TestControlStore: the control store contract, on memory, Redis and the
// cluster alike: versions move with every change, an unchanged version
// reads nothing, expired controls are dropped, deletes report.
func TestControlStore(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		cs := s.(checker.ControlStore)
		t.Run(name, func(t *testing.T) {
			v0, list, err := cs.Controls(ctx, -1, w0)
			if err != nil || len(list) != 0 {
				t.Fatalf("empty store: %v %v", list, err)
			}
			deny := checker.Control{ID: "a1", Domain: "api", Entries: []config.Entry{{Key: "ip", Value: "10.0.0.1"}},
				Action: checker.ActionDeny, CreatedAt: w0}
			brief := checker.Control{ID: "b2", Domain: "api", Entries: []config.Entry{{Key: "user", Value: "priya"}},
				Action: checker.ActionAllow, CreatedAt: w0, ExpiresAt: w0 + int64(time.Minute)}
			for _, c := range []checker.Control{deny, brief} {
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

// TestControlsAcrossCheckers: a deny set through one checker refuses on
// another that shares the Redis store, after its poll.
func TestControlsAcrossCheckers(t *testing.T) {
	ctx := context.Background()
	f, err := config.ParseRules("r.yaml", []byte("domain: api\ndescriptors:\n  - key: ip\n    algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range stores(t) {
		r, ok := s.(redisStore)
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			bus, err := events.NewMemBus(1, 1<<10)
			if err != nil {
				t.Fatal(err)
			}
			mk := func() *checker.Checker {
				c, err := checker.New(checker.Config{ControlPoll: 20 * time.Millisecond}, config.NewStore(rs), r.Redis, bus, limiter.SystemClock{})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Stop(ctx) })
				return c
			}
			a, b := mk(), mk()
			es := []config.Entry{{Key: "ip", Value: "10.0.0.1"}}
			q := &checker.Request{Domain: "api", Hits: 1, Descriptors: []checker.Descriptor{{Entries: es}}}
			var d checker.Decision
			if err := b.Check(ctx, q, &d); err != nil || !d.Allowed() {
				t.Fatalf("before: %v %v", d.Code, err)
			}
			if _, err := a.SetControl(ctx, checker.ControlSpec{Domain: "api", Entries: es, Action: checker.ActionDeny, Reason: "abuse"}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				if err := b.Check(ctx, q, &d); err != nil {
					t.Fatal(err)
				}
				if !d.Allowed() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the other checker never applied the deny")
				}
				time.Sleep(10 * time.Millisecond) // real poller, real Redis
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
		r.SeqKey("api:user_id/priya"):                         tag + ":q",
		r.base("api:user_id/priya"):                           tag,
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
