package rulestore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// memTable is a client table in memory, its log newest last.
type memTable struct {
	clients map[string]string
	plans   map[string]int // plan → clients on it
	seq     int64
	log     []rawBatch
	logged  int64         // changes in log
	wake    chan struct{} // closed at the next write
}

func (m *memory) table(domain, table string) *memTable {
	k := domain + "\x00" + table
	t := m.tables[k]
	if t == nil {
		t = &memTable{clients: map[string]string{}, plans: map[string]int{}, wake: make(chan struct{})}
		if m.tables == nil {
			m.tables = map[string]*memTable{}
		}
		m.tables[k] = t
	}
	return t
}

func (m *memory) setClients(_ context.Context, domain, table string, fields, plans []string, maxPlans int) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.table(domain, table)
	counts := maps.Clone(t.plans)
	cur := map[string]string{}
	for i, f := range fields {
		old, seen := cur[f]
		if !seen {
			old = t.clients[f]
		}
		if old != "" {
			if counts[old]--; counts[old] == 0 {
				delete(counts, old)
			}
		}
		if plans[i] != "" {
			counts[plans[i]]++
		}
		cur[f] = plans[i]
	}
	if len(counts) > maxPlans {
		return 0, &InputError{"changes", fmt.Sprintf("table %q would name %d plans, more than %d", table, len(counts), maxPlans)}
	}
	t.plans = counts
	var payload []byte
	for i, f := range fields {
		if plans[i] == "" {
			delete(t.clients, f)
		} else {
			t.clients[f] = plans[i]
		}
		payload = appendChange(payload, f, plans[i])
	}
	prev := t.seq
	t.seq += int64(len(fields))
	t.log = append(t.log, rawBatch{prev: prev, seq: t.seq, payload: payload})
	t.logged += int64(len(fields))
	for len(t.log) > 1 && t.logged-(t.log[0].seq-t.log[0].prev) >= ClientLogChanges {
		t.logged -= t.log[0].seq - t.log[0].prev
		t.log = slices.Delete(t.log, 0, 1)
	}
	close(t.wake)
	t.wake = make(chan struct{})
	return t.seq, nil
}

func (m *memory) clientPlan(_ context.Context, domain, table, field string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.table(domain, table).clients[field]
	return p, ok, nil
}

func (m *memory) scanClients(_ context.Context, domain, table string, fn func(field, plan string) error) (int64, error) {
	m.mu.Lock()
	t := m.table(domain, table)
	seq, snap := t.seq, maps.Clone(t.clients)
	m.mu.Unlock()
	for f, p := range snap {
		if err := fn(f, p); err != nil {
			return 0, err
		}
	}
	return seq, nil
}

func (m *memory) clientLog(ctx context.Context, domain, table string, after int64, wait time.Duration) ([]rawBatch, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		t := m.table(domain, table)
		var out []rawBatch
		if t.seq > after {
			i, _ := slices.BinarySearchFunc(t.log, after, func(b rawBatch, after int64) int {
				switch {
				case b.seq <= after:
					return -1
				case b.prev > after:
					return 1
				}
				return 0
			})
			if i == len(t.log) || t.log[i].prev > after {
				m.mu.Unlock()
				return nil, ErrClientLogGap
			}
			out = slices.Clone(t.log[i:min(len(t.log), i+1000)])
		}
		wake := t.wake
		m.mu.Unlock()
		if len(out) > 0 || wait <= 0 {
			return out, nil
		}
		select {
		case <-wake:
		case <-deadline.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (m *memory) tableInfo(_ context.Context, domain, table string) (int64, int64, []string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.table(domain, table)
	return t.seq, int64(len(t.clients)), slices.Collect(maps.Keys(t.plans)), nil
}
