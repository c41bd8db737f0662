package rulesync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/rulestore"
)

// Follower is a checker's rules retriever: it keeps Sources on the rules
// store's current versions. It hears of a write on the store's change feed
// and polls the store's versions as the fallback; every new version is
// compiled before it goes live, and one that does not compile is refused
// (logged, counted) while the domain's rules before it stay. The versions
// that are live are written to a cache file, so a checker started while
// the store is down starts with them.
type Follower struct {
	store *rulestore.Store
	src   *Sources
	opts  FollowerOptions
	log   *logx.Limited

	mu        sync.Mutex       // one sync at a time
	seen      map[string]int64 // domain → the version last taken or refused
	dirty     bool             // the live versions changed since the cache was written
	conflicts []string         // store domains a rule file defines too (refused)

	synced   atomic.Int64 // unix ns of the last sync that reached the store; 0: none yet
	refused  atomic.Int64
	applied  atomic.Int64
	fromDisk atomic.Bool

	cancel context.CancelFunc
	done   chan struct{}
}

// FollowerOptions are a Follower's settings.
type FollowerOptions struct {
	// Poll is how often the store's versions are read (default 1 s).
	Poll time.Duration
	// CacheFile keeps the live versions across a restart ("": none).
	CacheFile string
	// Logger takes refusals and outages, at most one line per 10 s each.
	Logger *slog.Logger
	// Now is the clock of the rules' age (default time.Now).
	Now func() time.Time
}

// NewFollower returns a Follower keeping src on store.
func NewFollower(store *rulestore.Store, src *Sources, opts FollowerOptions) *Follower {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Follower{store: store, src: src, opts: opts, log: logx.New(opts.Logger, 10*time.Second), seen: map[string]int64{}}
}

// Start reads the store once — or, when it cannot be reached, the cache
// file — and then follows it in the background until Stop. It fails only
// when the cache file exists and cannot be used: the rules it would start
// with are unknown.
func (f *Follower) Start(ctx context.Context) error {
	if err := f.Sync(ctx); err != nil {
		f.opts.Logger.Warn("rules store unreachable at start; starting from the cache file", "err", err, "cache", f.opts.CacheFile)
		if err := f.loadCache(); err != nil {
			return err
		}
	}
	f.mu.Lock()
	conflicts := f.conflicts
	f.mu.Unlock()
	if len(conflicts) > 0 {
		return fmt.Errorf("%s: a domain lives in rule files or in the rules store, not both (delete it from one)", strings.Join(conflicts, "; "))
	}
	loop, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	changes, err := f.store.Changes(loop)
	if err != nil {
		f.log.Warn("rules store change feed unavailable; polling only", "err", err)
	}
	go f.run(loop, changes)
	return nil
}

func (f *Follower) run(ctx context.Context, changes <-chan string) {
	defer close(f.done)
	t := time.NewTicker(f.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-changes:
			if !ok {
				changes = nil // the feed ended: polling only
				continue
			}
			f.SyncDomain(ctx, d)
		case <-t.C:
			if err := f.Sync(ctx); err != nil && ctx.Err() == nil {
				f.log.Warn("rules store unreachable; the last good rules stay", "err", err)
			}
		}
	}
}

// Stop ends following and waits for the loop, or for ctx.
func (f *Follower) Stop(ctx context.Context) error {
	if f.cancel == nil {
		return nil
	}
	f.cancel()
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sync reads the store's versions once and takes every domain whose
// version moved. It returns an error only when the store could not be read.
func (f *Follower) Sync(ctx context.Context) error {
	heads, err := f.store.Heads(ctx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(heads))
	for d, v := range heads {
		if f.seen[d] != v {
			names = append(names, d)
		}
	}
	sort.Strings(names)
	for _, d := range names {
		if err := f.take(ctx, d); err != nil {
			return err
		}
	}
	f.synced.Store(f.opts.Now().UnixNano())
	f.fromDisk.Store(false)
	f.writeCache()
	return nil
}

// SyncDomain reads domain's current version now and applies it: what the
// admin API calls after a write, so the writer's own checker enforces it
// before it answers.
func (f *Follower) SyncDomain(ctx context.Context, domain string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.take(ctx, domain); err != nil {
		f.log.Warn("rules store unreachable; the last good rules stay", "domain", domain, "err", err)
		return
	}
	f.writeCache()
}

// take reads domain's current version and applies it. Requires f.mu held.
func (f *Follower) take(ctx context.Context, domain string) error {
	v, err := f.store.Get(ctx, domain)
	if err != nil && !(errors.Is(err, rulestore.ErrNotFound) && v.Deleted) {
		if errors.Is(err, rulestore.ErrNotFound) {
			return nil // indexed, not written yet
		}
		return err
	}
	if f.seen[domain] == v.Version {
		return nil
	}
	f.seen[domain] = v.Version
	if path, ok := f.src.FileDomain(domain); ok && !v.Deleted {
		f.conflicts = append(f.conflicts, fmt.Sprintf("domain %q is in the rule file %s and in the rules store (version %d)", domain, path, v.Version))
	}
	if err := f.src.Apply(v); err != nil {
		f.refused.Add(1)
		f.opts.Logger.Error("rules version refused; the domain's rules before it stay", "domain", domain, "version", v.Version, "err", err)
		return nil
	}
	f.applied.Add(1)
	f.dirty = true
	f.opts.Logger.Info("rules version live", "domain", domain, "version", v.Version, "deleted", v.Deleted, "author", v.Author)
	return nil
}

// cacheFile is what the cache file holds: the live store versions.
type cacheFile struct {
	Written  time.Time           `json:"written"`
	Versions []rulestore.Version `json:"versions"`
}

// writeCache replaces the cache file when the live versions changed.
// Requires f.mu held.
func (f *Follower) writeCache() {
	if f.opts.CacheFile == "" || !f.dirty {
		return
	}
	live := f.src.Live()
	c := cacheFile{Written: f.opts.Now().UTC(), Versions: make([]rulestore.Version, 0, len(live))}
	for _, v := range live {
		c.Versions = append(c.Versions, v)
	}
	sort.Slice(c.Versions, func(i, j int) bool { return c.Versions[i].Domain < c.Versions[j].Domain })
	b, err := json.Marshal(c)
	if err == nil {
		err = writeAtomic(f.opts.CacheFile, b)
	}
	if err != nil {
		f.log.Warn("rules cache file not written", "file", f.opts.CacheFile, "err", err)
		return
	}
	f.dirty = false
}

// loadCache applies the cache file's versions. No file: nothing to do.
func (f *Follower) loadCache() error {
	if f.opts.CacheFile == "" {
		return nil
	}
	b, err := os.ReadFile(f.opts.CacheFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rules cache %s: %w", f.opts.CacheFile, err)
	}
	var c cacheFile
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("rules cache %s: not a cache of rules versions: %w", f.opts.CacheFile, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range c.Versions {
		if v.Domain == "" || v.Version < 1 || v.Deleted {
			return fmt.Errorf("rules cache %s: not a cache of rules versions: domain %q version %d", f.opts.CacheFile, v.Domain, v.Version)
		}
		if err := f.src.Apply(v); err != nil {
			return fmt.Errorf("rules cache %s: %w", f.opts.CacheFile, err)
		}
		f.seen[v.Domain] = v.Version
	}
	f.fromDisk.Store(len(c.Versions) > 0)
	return nil
}

// writeAtomic replaces path with b: a crash leaves the old file or the new.
func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// Age is how long ago the store was last read in full; ok is false when
// it has not been read since the process started (the rules are the
// cache file's or the files' alone).
func (f *Follower) Age() (age time.Duration, ok bool) {
	ns := f.synced.Load()
	if ns == 0 {
		return 0, false
	}
	return f.opts.Now().Sub(time.Unix(0, ns)), true
}

// Ready says why the rules are not to be trusted: never read from the
// store, or read longer than maxAge ago (0: no bound).
func (f *Follower) Ready(maxAge time.Duration) error {
	age, ok := f.Age()
	switch {
	case !ok:
		return errors.New("the rules store has not been read since start (rules from the cache file or the files)")
	case maxAge > 0 && age > maxAge:
		return fmt.Errorf("the rules store was last read %s ago (rules_store.max_age %s)", age.Round(time.Second), maxAge)
	}
	return nil
}

// Counts are the versions applied and refused since start.
func (f *Follower) Counts() (applied, refused int64) { return f.applied.Load(), f.refused.Load() }
