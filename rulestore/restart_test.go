package rulestore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// TestRedisRestart: a persistent Redis restarted keeps every version, a
// new store over it reads them, and a follower subscribed before the
// restart hears of writes after it.
func TestRedisRestart(t *testing.T) {
	p := testsvc.StartPrivateRedis(t)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
	defer c.Close()
	s, err := NewRedis(c, "vr", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 3; i++ {
		mustPut(t, s, Write{Domain: "kept", Body: fmt.Sprintf("v%d\n", i+1), IfMatch: int64(i)})
	}
	ch, err := s.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(t)
	if _, err := s.Get(ctx, "kept"); err == nil {
		t.Fatal("a read while Redis was down succeeded")
	}
	p.Start(t)

	c2 := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer c2.Close()
	s2, _ := NewRedis(c2, "vr", Options{})
	v, err := s2.Get(ctx, "kept")
	if err != nil || v.Version != 3 || v.Body != "v3\n" {
		t.Fatalf("after the restart: %+v, %v", v, err)
	}
	if vs, _ := s2.History(ctx, "kept", 0); len(vs) != 3 {
		t.Fatalf("history after the restart: %d versions", len(vs))
	}
	// the subscription comes back on its own; write until it is heard
	for n := int64(3); ; n++ {
		mustPut(t, s2, Write{Domain: "kept", Body: fmt.Sprintf("v%d\n", n+1), IfMatch: n})
		select {
		case d := <-ch:
			if d != "kept" {
				t.Fatalf("change names %q", d)
			}
			return
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the follower heard nothing within a minute of the restart")
		}
	}
}
