package rulestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

// stepClock is an injected clock that moves a second at every read.
type stepClock struct {
	mu sync.Mutex
	n  int
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return t0.Add(time.Duration(c.n) * time.Second)
}

// backends opens a fresh store per backend the suite has: memory always,
// Redis and the cluster when their services are there.
func backends(t *testing.T, opts Options) map[string]*Store {
	t.Helper()
	out := map[string]*Store{}
	mem, err := NewMemory(opts)
	if err != nil {
		t.Fatal(err)
	}
	out["memory"] = mem
	if os.Getenv(testsvc.EnvRedis) != "" {
		c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(t)})
		t.Cleanup(func() { c.Close() })
		s, err := NewRedis(c, testsvc.Unique("rs"), opts)
		if err != nil {
			t.Fatal(err)
		}
		out["redis"] = s
	}
	if os.Getenv(testsvc.EnvRedisCluster) != "" {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testsvc.RedisCluster(t)})
		t.Cleanup(func() { c.Close() })
		s, err := NewRedis(c, testsvc.Unique("rs"), opts)
		if err != nil {
			t.Fatal(err)
		}
		out["cluster"] = s
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, s *Store, w Write) Version {
	t.Helper()
	v, err := s.Put(ctxT(t), w)
	if err != nil {
		t.Fatalf("put %+v: %v", w, err)
	}
	return v
}

func wantConflict(t *testing.T, err error, current int64) {
	t.Helper()
	var c *ConflictError
	if !errors.As(err, &c) {
		t.Fatalf("got %v, want a conflict at version %d", err, current)
	}
	if c.Current != current {
		t.Fatalf("conflict names version %d, want %d", c.Current, current)
	}
}

// TestCompareAndSet: versions from 1, If-Match 0 creates, a stale If-Match
// is a conflict naming the current version, Any takes the current one.
func TestCompareAndSet(t *testing.T) {
	for name, s := range backends(t, Options{Now: (&stepClock{}).now}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			if _, err := s.Get(ctx, "api"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get of a new domain: %v, want ErrNotFound", err)
			}
			v1 := mustPut(t, s, Write{Domain: "api", Body: "domain: api\n", Author: "ci", Message: "first"})
			if v1.Version != 1 {
				t.Fatalf("first version %d, want 1", v1.Version)
			}
			got, err := s.Get(ctx, "api")
			if err != nil || got != v1 {
				t.Fatalf("get: %+v, %v; want %+v", got, err, v1)
			}
			if got.Time.Before(t0) || got.Author != "ci" || got.Message != "first" {
				t.Fatalf("version's metadata: %+v", got)
			}
			_, err = s.Put(ctx, Write{Domain: "api", Body: "x: 1\n"})
			wantConflict(t, err, 1)
			v2 := mustPut(t, s, Write{Domain: "api", Body: "domain: api # 2\n", IfMatch: 1})
			_, err = s.Put(ctx, Write{Domain: "api", Body: "stale\n", IfMatch: 1})
			wantConflict(t, err, 2)
			v3 := mustPut(t, s, Write{Domain: "api", Body: "domain: api # 3\n", IfMatch: Any})
			if v2.Version != 2 || v3.Version != 3 {
				t.Fatalf("versions %d, %d; want 2, 3", v2.Version, v3.Version)
			}
			if got, _ := s.Get(ctx, "api"); got.Body != "domain: api # 3\n" {
				t.Fatalf("current body %q", got.Body)
			}
			_, err = s.Put(ctx, Write{Domain: "api", Body: "future\n", IfMatch: 9})
			wantConflict(t, err, 3)
		})
	}
}

// TestHistoryIsBounded: the newest History versions are kept, newest
// first; At finds a kept one and says when one was dropped.
func TestHistoryIsBounded(t *testing.T) {
	for name, s := range backends(t, Options{History: 3, Now: (&stepClock{}).now}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			for i := 1; i <= 5; i++ {
				mustPut(t, s, Write{Domain: "h", Body: fmt.Sprintf("v%d\n", i), IfMatch: int64(i - 1)})
			}
			vs, err := s.History(ctx, "h", 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vs {
				got = append(got, fmt.Sprintf("%d:%s", v.Version, strings.TrimSpace(v.Body)))
			}
			if want := "5:v5 4:v4 3:v3"; strings.Join(got, " ") != want {
				t.Fatalf("history %v, want %s", got, want)
			}
			if vs, _ := s.History(ctx, "h", 2); len(vs) != 2 || vs[0].Version != 5 {
				t.Fatalf("history of 2: %+v", vs)
			}
			if v, err := s.At(ctx, "h", 4); err != nil || v.Body != "v4\n" {
				t.Fatalf("at 4: %+v, %v", v, err)
			}
			var in *InputError
			if _, err := s.At(ctx, "h", 1); !errors.As(err, &in) || !strings.Contains(in.Msg, "older than") {
				t.Fatalf("at 1 (dropped): %v", err)
			}
			if _, err := s.At(ctx, "h", 6); !errors.As(err, &in) || !strings.Contains(in.Msg, "no version 6") {
				t.Fatalf("at 6 (not yet): %v", err)
			}
			if vs, err := s.History(ctx, "never", 0); err != nil || len(vs) != 0 {
				t.Fatalf("history of a domain never written: %+v, %v", vs, err)
			}
		})
	}
}

// TestDeleteIsAVersion: a delete takes the next version, Get says there
// are no rules and names it, and the domain is written again from there.
func TestDeleteIsAVersion(t *testing.T) {
	for name, s := range backends(t, Options{Now: (&stepClock{}).now}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			if _, err := s.Delete(ctx, Write{Domain: "d", IfMatch: Any}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("delete of a domain never written: %v", err)
			}
			mustPut(t, s, Write{Domain: "d", Body: "a\n"})
			if _, err := s.Delete(ctx, Write{Domain: "d", IfMatch: 7}); err == nil {
				t.Fatal("a delete with a stale If-Match went through")
			} else {
				wantConflict(t, err, 1)
			}
			del, err := s.Delete(ctx, Write{Domain: "d", IfMatch: 1, Author: "ops", Message: "retired"})
			if err != nil || del.Version != 2 || !del.Deleted || del.Body != "" {
				t.Fatalf("delete: %+v, %v", del, err)
			}
			got, err := s.Get(ctx, "d")
			if !errors.Is(err, ErrNotFound) || got.Version != 2 || !got.Deleted {
				t.Fatalf("get after delete: %+v, %v; want ErrNotFound at version 2", got, err)
			}
			if _, err := s.Delete(ctx, Write{Domain: "d", IfMatch: Any}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("second delete: %v", err)
			}
			_, err = s.Put(ctx, Write{Domain: "d", Body: "b\n"})
			wantConflict(t, err, 2)
			if v := mustPut(t, s, Write{Domain: "d", Body: "b\n", IfMatch: 2}); v.Version != 3 {
				t.Fatalf("written again at %d, want 3", v.Version)
			}
			if h, err := s.Heads(ctx); err != nil || h["d"] != 3 {
				t.Fatalf("heads: %v, %v", h, err)
			}
		})
	}
}

// TestDomainsNeverShareKeys: domains holding the layout's separators,
// braces and the prefix's own words keep their own versions.
func TestDomainsNeverShareKeys(t *testing.T) {
	domains := []string{"a", "a}:h", "{a}", "a:v", "a}:v", "rules:domains", "ü", "a b", "}", "{", strings.Repeat("z", MaxDomainBytes)}
	for name, s := range backends(t, Options{}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			for i, d := range domains {
				for j := 0; j <= i; j++ { // domain i is at version i+1
					mustPut(t, s, Write{Domain: d, Body: fmt.Sprintf("%s #%d\n", d, j), IfMatch: int64(j)})
				}
			}
			heads, err := s.Heads(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(heads) != len(domains) {
				t.Fatalf("heads has %d domains, want %d: %v", len(heads), len(domains), heads)
			}
			for i, d := range domains {
				v, err := s.Get(ctx, d)
				if err != nil || v.Version != int64(i+1) || v.Body != fmt.Sprintf("%s #%d\n", d, i) || heads[d] != int64(i+1) {
					t.Fatalf("domain %q: %+v, %v, head %d; want version %d", d, v, err, heads[d], i+1)
				}
			}
		})
	}
}

// TestInputIsChecked: every refusal names its field.
func TestInputIsChecked(t *testing.T) {
	s, err := NewMemory(Options{MaxBodyBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		w     Write
		field string
		msg   string
	}{
		{"empty domain", Write{Body: "x"}, "domain", "must not be empty"},
		{"long domain", Write{Domain: strings.Repeat("d", MaxDomainBytes+1), Body: "x"}, "domain", "256 bytes, more than 255"},
		{"newline in domain", Write{Domain: "a\nb", Body: "x"}, "domain", "control character U+000A at offset 1"},
		{"invalid domain", Write{Domain: "a\xff", Body: "x"}, "domain", "invalid byte at offset 1"},
		{"dot-dot domain", Write{Domain: "..", Body: "x"}, "domain", `".." is not a domain name`},
		{"empty body", Write{Domain: "a"}, "body", "is empty"},
		{"big body", Write{Domain: "a", Body: strings.Repeat("b", 65)}, "body", "65 bytes, more than the store's 64"},
		{"binary body", Write{Domain: "a", Body: "ok\xc3("}, "body", "invalid byte at offset 2"},
		{"if-match", Write{Domain: "a", Body: "x", IfMatch: -2}, "if_match", "got -2"},
		{"author", Write{Domain: "a", Body: "x", Author: "a\x00"}, "author", "control character U+0000"},
		{"message", Write{Domain: "a", Body: "x", Message: strings.Repeat("m", MaxMessageBytes+1)}, "message", "more than 4096"},
	}
	for i, c := range cases {
		_, err := s.Put(context.Background(), c.w)
		var in *InputError
		if !errors.As(err, &in) || in.Field != c.field || !strings.Contains(in.Msg, c.msg) {
			t.Errorf("%d %s: got %v, want field %s and %q", i, c.name, err, c.field, c.msg)
		}
	}
	if h, _ := s.Heads(context.Background()); len(h) != 0 {
		t.Fatalf("refused writes left domains: %v", h)
	}
	for _, o := range []Options{{History: -1}, {History: MaxHistory + 1}, {MaxBodyBytes: -1}} {
		if _, err := NewMemory(o); err == nil {
			t.Errorf("options %+v were taken", o)
		}
	}
}

// TestConcurrentWritersOneWins: writers racing on one If-Match: exactly one
// wins each round; writers with Any all land, in consecutive versions.
func TestConcurrentWritersOneWins(t *testing.T) {
	const writers, rounds = 8, 10
	for name, s := range backends(t, Options{History: writers * rounds}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			for r := 0; r < rounds; r++ {
				var wg sync.WaitGroup
				var mu sync.Mutex
				won, conflicts := 0, 0
				for w := 0; w < writers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, err := s.Put(ctx, Write{Domain: "race", Body: fmt.Sprintf("r%d w%d\n", r, w), IfMatch: int64(r)})
						mu.Lock()
						defer mu.Unlock()
						var c *ConflictError
						switch {
						case err == nil:
							won++
						case errors.As(err, &c) && c.Current == int64(r+1):
							conflicts++
						default:
							t.Errorf("round %d writer %d: %v", r, w, err)
						}
					}()
				}
				wg.Wait()
				if won != 1 || conflicts != writers-1 {
					t.Fatalf("round %d: %d won, %d conflicts; want 1 and %d", r, won, conflicts, writers-1)
				}
			}
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < rounds; i++ {
						if _, err := s.Put(ctx, Write{Domain: "any", Body: fmt.Sprintf("w%d i%d\n", w, i), IfMatch: Any}); err != nil {
							t.Errorf("writer %d: %v", w, err)
						}
					}
				}()
			}
			wg.Wait()
			vs, err := s.History(ctx, "any", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(vs) != writers*rounds {
				t.Fatalf("%d versions, want %d", len(vs), writers*rounds)
			}
			seen := map[string]bool{}
			for i, v := range vs {
				if v.Version != int64(writers*rounds-i) || seen[v.Body] {
					t.Fatalf("version %d at %d (body %q seen before: %v)", v.Version, i, v.Body, seen[v.Body])
				}
				seen[v.Body] = true
			}
		})
	}
}

// TestChangesAnnounceWrites: a follower hears of each write's domain.
func TestChangesAnnounceWrites(t *testing.T) {
	for name, s := range backends(t, Options{}) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctxT(t))
			ch, err := s.Changes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			mustPut(t, s, Write{Domain: "watched", Body: "a\n"})
			if _, err := s.Delete(ctx, Write{Domain: "watched", IfMatch: Any}); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				select {
				case d := <-ch:
					if d != "watched" {
						t.Fatalf("change %d names %q", i, d)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("change %d not announced within 10 s", i)
				}
			}
			cancel()
			for range ch { // closes once ctx ends
			}
		})
	}
}

// TestStagedVersions: a staged version carries the live document it
// leaves in force — across staged versions in a row, and none for a
// domain with no live rules — and a live write ends the staging.
func TestStagedVersions(t *testing.T) {
	for name, s := range backends(t, Options{}) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			v1, err := s.Put(ctx, Write{Domain: "d", Body: "staged first", Stage: StageShadow})
			if err != nil || v1.Stage != StageShadow || v1.LiveVersion != 0 || v1.LiveBody != "" {
				t.Fatalf("staged with nothing live: %+v %v", v1, err)
			}
			mustPut(t, s, Write{Domain: "d", Body: "live two", IfMatch: 1})
			v3, err := s.Put(ctx, Write{Domain: "d", Body: "staged three", IfMatch: 2, Stage: StageShadow})
			if err != nil || v3.LiveVersion != 2 || v3.LiveBody != "live two" {
				t.Fatalf("staged over 2: %+v %v", v3, err)
			}
			if _, err := s.Put(ctx, Write{Domain: "d", Body: "staged four", IfMatch: 2, Stage: StageShadow}); err == nil {
				t.Fatal("a staged write on a stale version was taken")
			}
			v4, err := s.Put(ctx, Write{Domain: "d", Body: "staged four", IfMatch: Any, Stage: StageShadow})
			if err != nil || v4.Version != 4 || v4.LiveVersion != 2 || v4.LiveBody != "live two" {
				t.Fatalf("staged again: %+v %v", v4, err)
			}
			got, err := s.Get(ctx, "d")
			if err != nil || got.Stage != StageShadow || got.LiveBody != "live two" || got.Body != "staged four" {
				t.Fatalf("get: %+v %v", got, err)
			}
			v5 := mustPut(t, s, Write{Domain: "d", Body: "staged four", IfMatch: 4})
			if v5.Stage != "" || v5.LiveVersion != 0 || v5.LiveBody != "" {
				t.Fatalf("promoted: %+v", v5)
			}
			if _, err := s.Put(ctx, Write{Domain: "d", Body: "x", IfMatch: Any, Stage: "canary"}); err == nil || !strings.Contains(err.Error(), `stage: want "shadow"`) {
				t.Fatalf("an unknown stage: %v", err)
			}
			if _, err := s.Put(ctx, Write{Domain: "d#staged", Body: "x"}); err == nil || !strings.Contains(err.Error(), "names a domain's staged rules") {
				t.Fatalf("a staged domain's name: %v", err)
			}
		})
	}
}
