package controlset

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
)

// Poller keeps the Set in force current with a control store and the
// live rules: Sync reads the store (only what changed since its last
// read) and compiles again when the controls, the rules or an expiry
// changed what applies. Current is what the request path loads.
type Poller struct {
	store   counters.ControlStore
	rules   *config.Store
	seed    maphash.Seed
	current atomic.Pointer[Set]
	mu      sync.Mutex
	version int64 // the store's at the last read (0: none yet)
}

// NewPoller returns a poller of store under the live rules, hashing
// descriptors with seed.
func NewPoller(store counters.ControlStore, rules *config.Store, seed maphash.Seed) *Poller {
	return &Poller{store: store, rules: rules, seed: seed}
}

// Current is the Set in force, nil when no control is (the request path
// then skips controls with one load). Safe for concurrent use.
func (p *Poller) Current() *Set {
	if p == nil {
		return nil
	}
	return p.current.Load()
}

// Sync reads the control store at now and compiles what applies when
// anything changed; on a failed read the last Set stays in force.
func (p *Poller) Sync(ctx context.Context, now int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := p.version
	if since == 0 {
		since = -1
	}
	v, list, err := p.store.Controls(ctx, since, now)
	if err != nil {
		return fmt.Errorf("reading controls: %w", err)
	}
	rs, cur := p.rules.Load(), p.current.Load()
	switch {
	case v != p.version || p.version == 0:
		p.version = v
	case cur != nil && cur.Rules() == rs && !cur.Expired(now):
		return nil // nothing changed
	case cur == nil:
		return nil
	default:
		list = cur.List() // the rules changed or a control expired: rebuild
	}
	if set := Compile(rs, list, now, p.seed); len(set.List()) > 0 {
		p.current.Store(set) // also when none applies now: a reload may bring its rule back
	} else {
		p.current.Store(nil)
	}
	return nil
}
