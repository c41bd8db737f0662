package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Store holds the live RuleSet. Readers call Load on every request (one
// atomic load, no lock); a reload swaps the whole set in one atomic store,
// so a reader sees either the old set or the new one, never a mix.
type Store struct {
	p atomic.Pointer[RuleSet]
}

// NewStore returns a Store serving rs.
func NewStore(rs *RuleSet) *Store {
	s := &Store{}
	s.p.Store(rs)
	return s
}

// Load returns the live RuleSet.
func (s *Store) Load() *RuleSet { return s.p.Load() }

// Swap makes rs live.
func (s *Store) Swap(rs *RuleSet) { s.p.Store(rs) }

// Watcher reloads rules into a Store when the files under its paths change
// (content, additions, removals). An invalid new version is reported to
// OnError and the last good set stays live. Polling, not inotify: it works
// the same on Kubernetes ConfigMap symlink swaps and network filesystems.
type Watcher struct {
	paths    []string
	store    *Store
	interval time.Duration
	// OnReload is called after a new set went live; OnError when a changed
	// set was rejected. Either may be nil. Called from the watcher's
	// goroutine (or Check's caller).
	OnReload func(*RuleSet)
	OnError  func(error)
	// Use makes newly read files live and returns the set they made; nil
	// compiles them alone and swaps the set into the store. Rules from
	// another place (the rules store) are merged in here.
	Use func([]*File) (*RuleSet, error)

	mu     sync.Mutex
	digest [32]byte
	cancel context.CancelFunc
	done   chan struct{}
}

// NewWatcher returns a Watcher of paths feeding store, polling every
// interval once started. The current files' digest is taken now, so the
// first Check reloads only if something changed since.
func NewWatcher(store *Store, interval time.Duration, paths ...string) (*Watcher, error) {
	if interval <= 0 {
		return nil, errors.New("config: watcher interval must be > 0")
	}
	w := &Watcher{paths: paths, store: store, interval: interval}
	d, err := digest(paths)
	if err != nil {
		return nil, err
	}
	w.digest = d
	return w, nil
}

// Check polls once: if the files changed, it loads them and swaps the new
// set in, or keeps the old one and returns why not. It reports whether a
// new set went live.
func (w *Watcher) Check() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d, err := digest(w.paths)
	if err != nil {
		w.report(err)
		return false, err
	}
	if d == w.digest {
		return false, nil
	}
	rs, err := w.load()
	if err != nil {
		// remember the digest so a bad file is reported once, not every poll
		w.digest = d
		w.report(err)
		return false, err
	}
	w.digest = d
	if w.OnReload != nil {
		w.OnReload(rs)
	}
	return true, nil
}

// load reads the files and makes them live (a fault in the parser or the
// compiler is an error, as in LoadRules).
func (w *Watcher) load() (rs *RuleSet, err error) {
	defer func() {
		if p := recover(); p != nil {
			rs, err = nil, fmt.Errorf("config: internal error loading rules from %s: %v (please report it)", strings.Join(w.paths, ", "), p)
		}
	}()
	files, err := ReadRuleFiles(w.paths...)
	if err != nil {
		return nil, err
	}
	if w.Use != nil {
		return w.Use(files)
	}
	if rs, err = Compile(files); err != nil {
		return nil, err
	}
	w.store.Swap(rs)
	return rs, nil
}

func (w *Watcher) report(err error) {
	if w.OnError != nil {
		w.OnError(err)
	}
}

// Start polls in a goroutine until Stop.
func (w *Watcher) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(w.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = w.Check()
			}
		}
	}()
	return nil
}

// Stop ends polling and waits for the goroutine, or for ctx.
func (w *Watcher) Stop(ctx context.Context) error {
	if w.cancel == nil {
		return nil
	}
	w.cancel()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// digest hashes the names and contents of every rule file under paths.
// A file that cannot be read (a link out of the directory, a FIFO) hashes
// as its error: the change is noticed and the loader reports it once.
func digest(paths []string) ([32]byte, error) {
	h := sha256.New()
	for _, root := range paths {
		dir, err := openRuleDir(root)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			// an empty directory is a change worth loading (and rejecting)
			h.Write([]byte("!" + root))
			continue
		}
		for _, f := range dir.files {
			h.Write([]byte(filepath.Clean(f.name)))
			h.Write([]byte{0})
			if err := dir.hash(h, f); err != nil {
				h.Write([]byte("!" + err.Error()))
			}
			h.Write([]byte{0})
		}
		dir.Close()
	}
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d, nil
}
