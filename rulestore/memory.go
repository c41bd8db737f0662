package rulestore

import (
	"context"
	"sync"
)

// NewMemory returns a store that keeps everything in this process: `dev`
// and tests. Its history is lost when the process ends.
func NewMemory(opts Options) (*Store, error) {
	return newStore(&memory{domains: map[string][]Version{}, subs: map[chan string]struct{}{}}, opts)
}

// memory holds each domain's versions, newest last.
type memory struct {
	mu      sync.Mutex
	domains map[string][]Version
	subs    map[chan string]struct{}
	tables  map[string]*memTable // domain NUL table
}

func (m *memory) latest(_ context.Context, domain string) (Version, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.domains[domain]
	if len(vs) == 0 {
		return Version{}, false, nil
	}
	return vs[len(vs)-1], true, nil
}

func (m *memory) appendIf(_ context.Context, expected int64, v Version, keep int) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.domains[v.Domain]
	var cur int64
	if len(vs) > 0 {
		cur = vs[len(vs)-1].Version
	}
	if cur != expected {
		return cur, false, nil
	}
	vs = append(vs, v)
	if len(vs) > keep {
		// copy down so the dropped versions' bodies can be collected
		vs = append(vs[:0:0], vs[len(vs)-keep:]...)
	}
	m.domains[v.Domain] = vs
	for ch := range m.subs {
		select {
		case ch <- v.Domain:
		default: // a slow follower polls heads
		}
	}
	return v.Version, true, nil
}

func (m *memory) history(_ context.Context, domain string, n int) ([]Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.domains[domain]
	out := make([]Version, 0, min(n, len(vs)))
	for i := len(vs) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, vs[i])
	}
	return out, nil
}

func (m *memory) heads(context.Context) (map[string]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := make(map[string]int64, len(m.domains))
	for d, vs := range m.domains {
		h[d] = vs[len(vs)-1].Version
	}
	return h, nil
}

func (m *memory) changes(ctx context.Context) (<-chan string, error) {
	ch := make(chan string, 64)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	go func() {
		<-ctx.Done()
		m.mu.Lock()
		delete(m.subs, ch)
		close(ch)
		m.mu.Unlock()
	}()
	return ch, nil
}

func (m *memory) close() error { return nil }
