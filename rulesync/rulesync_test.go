package rulesync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/rulestore"
)

// doc is a rule document of domain d limiting key k to n per minute.
func ruleDoc(d, k string, n int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", d, k, n)
}

// fileSources are Sources over one parsed rule file of domain "files".
func fileSources(t *testing.T) (*Sources, *config.Store) {
	t.Helper()
	f, err := config.ParseRules("rules/files.yaml", []byte(ruleDoc("files", "ip", 10)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	live := config.NewStore(rs)
	return NewSources(live, []*config.File{f}), live
}

// limitOf is the live limit of domain's only rule, or -1 without one.
func limitOf(live *config.Store, domain string) int64 {
	for _, r := range live.Load().Rules() {
		if r.Domain == domain {
			return r.Limit
		}
	}
	return -1
}

func version(d string, n int64, body string) rulestore.Version {
	return rulestore.Version{Domain: d, Version: n, Body: body}
}

// TestSourcesApply: store versions go live beside the files; one that does
// not compile, names another domain or takes a file's domain is refused
// with where, and the rules before it stay.
func TestSourcesApply(t *testing.T) {
	src, live := fileSources(t)
	steps := []struct {
		v         rulestore.Version
		err       string // "" applies
		api, file int64  // the live limits after the step
	}{
		{version("api", 1, ruleDoc("api", "user", 5)), "", 5, 10},
		{version("api", 2, ruleDoc("api", "user", 7)), "", 7, 10},
		{version("api", 3, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), "store:api@3:4:", 7, 10},
		{version("api", 4, ruleDoc("other", "user", 9)), `the document's domain "other" is not the domain it is stored under, "api"`, 7, 10},
		{version("files", 1, ruleDoc("files", "ip", 99)), `store:files@1:1:1: domain "files" is already defined in rules/files.yaml`, 7, 10},
		{rulestore.Version{Domain: "api", Version: 5, Deleted: true}, "", -1, 10},
		{version("api", 6, ruleDoc("api", "user", 3)), "", 3, 10},
	}
	for i, st := range steps {
		err := src.Apply(st.v)
		switch {
		case st.err == "" && err != nil:
			t.Fatalf("step %d: %v", i, err)
		case st.err != "" && (err == nil || !strings.Contains(err.Error(), st.err)):
			t.Fatalf("step %d: got %v, want an error with %q", i, err, st.err)
		}
		if got := limitOf(live, "api"); got != st.api {
			t.Fatalf("step %d: api's limit %d, want %d", i, got, st.api)
		}
		if got := limitOf(live, "files"); got != st.file {
			t.Fatalf("step %d: the file's limit %d, want %d", i, got, st.file)
		}
	}
	if v := src.Live()["api"]; v.Version != 6 {
		t.Fatalf("live versions: %+v", src.Live())
	}
	if p, ok := src.FileDomain("files"); !ok || p != "rules/files.yaml" {
		t.Fatalf("FileDomain: %q %v", p, ok)
	}
	// files changing keep the store's domains
	f2, _ := config.ParseRules("rules/files.yaml", []byte(ruleDoc("files", "ip", 20)))
	if _, err := src.SetFiles([]*config.File{f2}); err != nil {
		t.Fatal(err)
	}
	if limitOf(live, "files") != 20 || limitOf(live, "api") != 3 {
		t.Fatalf("after new files: files %d, api %d", limitOf(live, "files"), limitOf(live, "api"))
	}
	// a file taking a store domain is refused as a whole
	clash, _ := config.ParseRules("rules/api.yaml", []byte(ruleDoc("api", "ip", 1)))
	if _, err := src.SetFiles([]*config.File{f2, clash}); err == nil || !strings.Contains(err.Error(), `domain "api" is already defined`) {
		t.Fatalf("a file of a store domain: %v", err)
	}
	if limitOf(live, "api") != 3 {
		t.Fatal("a refused file set changed the live rules")
	}
}

// fakeClock is an injected clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestFollowerSyncAndCache: a sync takes new versions and refuses a bad
// one (counted, the rules before it stay); the cache file lets a checker
// whose store is down start with the live versions, not ready until it
// reads the store.
func TestFollowerSyncAndCache(t *testing.T) {
	ctx := context.Background()
	store, err := rulestore.NewMemory(rulestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}
	cache := filepath.Join(t.TempDir(), "rules-store.json")
	src, live := fileSources(t)
	f := NewFollower(store, src, FollowerOptions{Poll: time.Hour, CacheFile: cache, Now: clock.now})
	if err := f.Ready(0); err == nil {
		t.Fatal("ready before any read")
	}
	if _, err := store.Put(ctx, rulestore.Write{Domain: "api", Body: ruleDoc("api", "user", 5)}); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if limitOf(live, "api") != 5 || f.Ready(time.Minute) != nil {
		t.Fatalf("after a sync: limit %d, ready %v", limitOf(live, "api"), f.Ready(time.Minute))
	}
	// a bad version is refused once, not at every poll
	if _, err := store.Put(ctx, rulestore.Write{Domain: "api", Body: "domain: api\ndescriptors: 7\n", IfMatch: 1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := f.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if applied, refused := f.Counts(); applied != 1 || refused != 1 || limitOf(live, "api") != 5 {
		t.Fatalf("applied %d, refused %d, limit %d; want 1, 1, 5", applied, refused, limitOf(live, "api"))
	}
	clock.add(2 * time.Minute)
	if err := f.Ready(time.Minute); err == nil || !strings.Contains(err.Error(), "last read 2m0s ago") {
		t.Fatalf("stale rules: %v", err)
	}
	b, err := os.ReadFile(cache)
	if err != nil || !strings.Contains(string(b), `"version":1`) {
		t.Fatalf("cache file: %s, %v", b, err)
	}

	// the store down (nothing listens there): the cache's versions go live
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	down, _ := rulestore.NewRedis(c, "vr", rulestore.Options{})
	src2, live2 := fileSources(t)
	f2 := NewFollower(down, src2, FollowerOptions{Poll: time.Hour, CacheFile: cache, Now: clock.now})
	if err := f2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer f2.Stop(ctx)
	if limitOf(live2, "api") != 5 {
		t.Fatalf("started from the cache: limit %d, want 5", limitOf(live2, "api"))
	}
	if err := f2.Ready(0); err == nil {
		t.Fatal("ready on the cache alone")
	}

	// a damaged cache stops the start with where
	os.WriteFile(cache, []byte(`{"versions":[{"domain":"api","version":1,"body":"domain: api\ndescriptors: 7\n"}]}`), 0o600)
	src3, _ := fileSources(t)
	err = NewFollower(down, src3, FollowerOptions{CacheFile: cache}).Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "rules cache "+cache) {
		t.Fatalf("a damaged cache: %v", err)
	}
}

// TestFollowerHearsChanges: with the poll an hour away, a write reaches
// the live rules through the change feed, and a delete takes them out.
func TestFollowerHearsChanges(t *testing.T) {
	ctx := context.Background()
	store, _ := rulestore.NewMemory(rulestore.Options{})
	src, live := fileSources(t)
	f := NewFollower(store, src, FollowerOptions{Poll: time.Hour})
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer f.Stop(ctx)
	waitLimit := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for limitOf(live, "api") != want {
			if time.Now().After(deadline) {
				t.Fatalf("limit %d after 10 s, want %d", limitOf(live, "api"), want)
			}
			time.Sleep(time.Millisecond) // waiting for the follower's goroutine, not for time to pass
		}
	}
	if _, err := store.Put(ctx, rulestore.Write{Domain: "api", Body: ruleDoc("api", "user", 5)}); err != nil {
		t.Fatal(err)
	}
	waitLimit(5)
	if _, err := store.Delete(ctx, rulestore.Write{Domain: "api", IfMatch: rulestore.Any}); err != nil {
		t.Fatal(err)
	}
	waitLimit(-1)
	if err := f.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestADomainInBothPlacesStopsTheStart: a store domain a rule file defines
// too is an error at start naming both places.
func TestADomainInBothPlacesStopsTheStart(t *testing.T) {
	ctx := context.Background()
	store, _ := rulestore.NewMemory(rulestore.Options{})
	if _, err := store.Put(ctx, rulestore.Write{Domain: "files", Body: ruleDoc("files", "ip", 3)}); err != nil {
		t.Fatal(err)
	}
	src, live := fileSources(t)
	err := NewFollower(store, src, FollowerOptions{}).Start(ctx)
	if err == nil || !strings.Contains(err.Error(), `domain "files" is in the rule file rules/files.yaml and in the rules store (version 1)`) {
		t.Fatalf("start: %v", err)
	}
	if limitOf(live, "files") != 10 {
		t.Fatal("the store's version replaced the file's")
	}
}
