package sink

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is the in-process Store of `velvetrope dev` and of tests that
// need no ClickHouse: the newest version of each row, kept for Retention
// (rows of older minutes are dropped as new ones arrive). Safe for
// concurrent use.
type Memory struct {
	mu        sync.Mutex
	rows      map[rowKey]Row
	retention time.Duration
	now       func() time.Time
	pruned    int64 // the minute up to which rows were dropped
}

// NewMemory returns an empty store keeping rows for retention (24 h if 0).
func NewMemory(retention time.Duration) *Memory {
	if retention <= 0 {
		retention = 24 * time.Hour
	}
	return &Memory{rows: map[rowKey]Row{}, retention: retention, now: time.Now}
}

// SetClock replaces the clock retention is measured against (time.Now):
// rows older than the retention are dropped as new ones arrive. Tests
// with fixed timestamps pin it, so their rows do not age out as the real
// date moves on.
func (m *Memory) SetClock(now func() time.Time) {
	m.mu.Lock()
	m.now = now
	m.mu.Unlock()
}

// Insert implements Store.
func (m *Memory) Insert(_ context.Context, rows []Row) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		k := r.key()
		if old, ok := m.rows[k]; !ok || r.Version > old.Version {
			m.rows[k] = r
		}
	}
	if cut := m.now().Add(-m.retention).Unix() / 60 * 60; cut > m.pruned {
		for k := range m.rows {
			if k.minute < cut {
				delete(m.rows, k)
			}
		}
		m.pruned = cut
	}
	return nil
}

// Len returns the number of rows held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

// each calls f for every row of a minute at or after since.
func (m *Memory) each(since time.Time, f func(*Row)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := since.Unix()
	for _, r := range m.rows {
		if r.Minute >= s {
			f(&r)
		}
	}
}

// TopDenied implements Analytics.
func (m *Memory) TopDenied(_ context.Context, q TopQuery) ([]KeyUsage, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	type k struct{ domain, rule, desc string }
	sums := map[k]*KeyUsage{}
	m.each(q.Since, func(r *Row) {
		if (q.Domain != "" && r.Domain != q.Domain) || (q.Rule != "" && r.Rule != q.Rule) {
			return
		}
		u := sums[k{r.Domain, r.Rule, r.Descriptor}]
		if u == nil {
			u = &KeyUsage{Domain: r.Domain, Rule: r.Rule, Descriptor: r.Descriptor}
			sums[k{r.Domain, r.Rule, r.Descriptor}] = u
		}
		u.Denied += r.Denied
		u.Allowed += r.Allowed
		u.Deferred += r.Deferred
	})
	out := make([]KeyUsage, 0, len(sums))
	for _, u := range sums {
		if u.Denied+u.Deferred > 0 {
			out = append(out, *u)
		}
	}
	slices.SortFunc(out, compareTop)
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// compareTop orders keys most refused first (denied or deferred: both
// are the limit at work), then by name (the order the ClickHouse query
// uses).
func compareTop(a, b KeyUsage) int {
	return cmp.Or(cmp.Compare(b.Denied+b.Deferred, a.Denied+a.Deferred), cmp.Compare(b.Denied, a.Denied), cmp.Compare(a.Domain, b.Domain),
		cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Descriptor, b.Descriptor))
}

// Usage implements Analytics.
func (m *Memory) Usage(_ context.Context, q UsageQuery) ([]MinuteUsage, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	return m.perMinute(q.Since, func(r *Row) bool {
		return r.Domain == q.Domain && r.Descriptor == q.Descriptor && (q.Rule == "" || r.Rule == q.Rule)
	}), nil
}

// Timeline implements Analytics.
func (m *Memory) Timeline(_ context.Context, q TimelineQuery) ([]MinuteUsage, error) {
	return m.perMinute(q.Since, func(r *Row) bool { return q.Domain == "" || r.Domain == q.Domain }), nil
}

func (m *Memory) perMinute(since time.Time, match func(*Row) bool) []MinuteUsage {
	sums := map[int64]*MinuteUsage{}
	m.each(since, func(r *Row) {
		if !match(r) {
			return
		}
		u := sums[r.Minute]
		if u == nil {
			u = &MinuteUsage{Minute: time.Unix(r.Minute, 0).UTC()}
			sums[r.Minute] = u
		}
		u.Allowed += r.Allowed
		u.Denied += r.Denied
		u.Deferred += r.Deferred
		u.ShadowDenied += r.ShadowDenied
		u.AllowedCost += r.AllowedCost
		u.DeniedCost += r.DeniedCost
	})
	out := make([]MinuteUsage, 0, len(sums))
	for _, u := range sums {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b MinuteUsage) int { return a.Minute.Compare(b.Minute) })
	return out
}

// Rules implements Analytics.
func (m *Memory) Rules(_ context.Context, q RulesQuery) ([]RuleUsage, error) {
	type k struct{ domain, rule string }
	sums := map[k]*RuleUsage{}
	m.each(q.Since, func(r *Row) {
		if q.Domain != "" && r.Domain != q.Domain {
			return
		}
		u := sums[k{r.Domain, r.Rule}]
		if u == nil {
			u = &RuleUsage{Domain: r.Domain, Rule: r.Rule}
			sums[k{r.Domain, r.Rule}] = u
		}
		u.Allowed += r.Allowed
		u.Denied += r.Denied
		u.Deferred += r.Deferred
		u.ShadowDenied += r.ShadowDenied
	})
	out := make([]RuleUsage, 0, len(sums))
	for _, u := range sums {
		u.DenyRate = denyRate(u.Allowed, u.Denied, u.Deferred)
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b RuleUsage) int { return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Rule, b.Rule)) })
	return out, nil
}
