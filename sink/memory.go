package sink

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/velvetrope/velvetrope/config"
)

// DefaultMemoryMaxBytes bounds a Memory store unless SetMaxBytes says
// otherwise: 64 MiB, about 250,000 rows of short descriptors.
const DefaultMemoryMaxBytes = 64 << 20

// Memory is the in-process Store of `velvetrope dev` and of tests that
// need no ClickHouse: the newest version of each row, kept for Retention
// (rows of older minutes are dropped as new ones arrive) and within a
// bound in bytes (past it the rows of the oldest minutes are dropped
// first, counted in Dropped). Safe for concurrent use.
type Memory struct {
	mu        sync.Mutex
	minutes   map[int64]map[rowKey]Row // rows by minute
	retention time.Duration
	now       func() time.Time
	pruned    int64 // the minute up to which rows were dropped
	bytes     int64 // what the rows hold, as estimated (rowBytes)
	maxBytes  int64
	rows      int

	// Dropped counts rows dropped over the bound in bytes (not those
	// past the retention, which age out as intended).
	Dropped atomic.Uint64

	audit memoryRuleChanges
}

// NewMemory returns an empty store keeping rows for retention (24 h if 0)
// within DefaultMemoryMaxBytes.
func NewMemory(retention time.Duration) *Memory {
	if retention <= 0 {
		retention = 24 * time.Hour
	}
	return &Memory{minutes: map[int64]map[rowKey]Row{}, retention: retention, now: time.Now, maxBytes: DefaultMemoryMaxBytes}
}

// SetMaxBytes bounds what the rows hold (n > 0), dropping the oldest
// minutes' rows now if they are over it.
func (m *Memory) SetMaxBytes(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n > 0 {
		m.maxBytes = n
		m.bound()
	}
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

// rowBytes estimates the heap a row holds in the store: the row and its
// key (which share the strings), its map slot, and its strings.
func rowBytes(r *Row) int64 {
	return int64(unsafe.Sizeof(Row{})+unsafe.Sizeof(rowKey{})) + 32 +
		int64(len(r.Domain)+len(r.Rule)+len(r.Descriptor)+len(r.Instance))
}

// Insert implements Store.
func (m *Memory) Insert(_ context.Context, rows []Row) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		k := r.key()
		mm := m.minutes[k.minute]
		if mm == nil {
			mm = map[rowKey]Row{}
			m.minutes[k.minute] = mm
		}
		old, ok := mm[k]
		switch {
		case !ok:
			m.rows++
			m.bytes += rowBytes(&r)
		case r.Version <= old.Version:
			continue
		default:
			m.bytes += rowBytes(&r) - rowBytes(&old)
		}
		mm[k] = r
	}
	if cut := m.now().Add(-m.retention).Unix() / 60 * 60; cut > m.pruned {
		for minute := range m.minutes {
			if minute < cut {
				m.dropMinute(minute)
			}
		}
		m.pruned = cut
	}
	m.bound()
	return nil
}

// dropMinute removes a minute's rows (requires m.mu); it returns how many.
func (m *Memory) dropMinute(minute int64) int {
	mm := m.minutes[minute]
	for _, r := range mm {
		m.bytes -= rowBytes(&r)
	}
	m.rows -= len(mm)
	delete(m.minutes, minute)
	return len(mm)
}

// bound drops rows past maxBytes, the oldest minutes first; within the
// oldest minute left, rows go until the rest fits (requires m.mu).
func (m *Memory) bound() {
	for m.bytes > m.maxBytes && m.rows > 0 {
		oldest := int64(0)
		first := true
		for minute := range m.minutes {
			if first || minute < oldest {
				oldest, first = minute, false
			}
		}
		mm := m.minutes[oldest]
		if len(mm) == 0 {
			delete(m.minutes, oldest)
			continue
		}
		for k, r := range mm {
			if m.bytes <= m.maxBytes {
				break
			}
			m.bytes -= rowBytes(&r)
			m.rows--
			delete(mm, k)
			m.Dropped.Add(1)
		}
		if len(mm) == 0 {
			delete(m.minutes, oldest)
		}
	}
}

// Len returns the number of rows held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows
}

// Bytes returns what the rows hold, as estimated for the bound.
func (m *Memory) Bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}

// each calls f for every row of a minute at or after since.
func (m *Memory) each(since time.Time, f func(*Row)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := since.Unix()
	for minute, mm := range m.minutes {
		if minute < s {
			continue
		}
		for _, r := range mm {
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
		if r.Pool || (q.Domain != "" && r.Domain != q.Domain) || (q.Rule != "" && r.Rule != q.Rule) {
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
		u.ShadowDenied += r.ShadowDenied
		u.OverSoft += r.OverSoft
		u.Elastic += r.Elastic
		u.Late += r.Late
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

// perMinute sums the rows match takes per minute, pools' rows left out.
func (m *Memory) perMinute(since time.Time, match func(*Row) bool) []MinuteUsage {
	sums := map[int64]*MinuteUsage{}
	m.each(since, func(r *Row) {
		if r.Pool || !match(r) {
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
		u.OverSoft += r.OverSoft
		u.Elastic += r.Elastic
		u.Late += r.Late
		u.AllowedCost += r.AllowedCost
		u.DeniedCost += r.DeniedCost
		u.LateCost += r.LateCost
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
		if r.Pool || q.Domain != "" && r.Domain != q.Domain {
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
		u.OverSoft += r.OverSoft
		u.Elastic += r.Elastic
		u.Late += r.Late
	})
	out := make([]RuleUsage, 0, len(sums))
	for _, u := range sums {
		u.DenyRate = DenyRate(u.Allowed, u.Denied, u.Deferred, u.ShadowDenied)
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b RuleUsage) int { return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Rule, b.Rule)) })
	return out, nil
}

// Pools implements Analytics.
func (m *Memory) Pools(_ context.Context, q PoolsQuery) ([]PoolUsage, error) {
	type k struct{ domain, rule string }
	sums := map[k]*PoolUsage{}
	m.each(q.Since, func(r *Row) {
		if !r.Pool || q.Domain != "" && r.Domain != q.Domain {
			return
		}
		u := sums[k{r.Domain, r.Rule}]
		if u == nil {
			name, _ := config.PoolOf(r.Rule)
			u = &PoolUsage{Domain: r.Domain, Pool: name, Rule: r.Rule}
			sums[k{r.Domain, r.Rule}] = u
		}
		u.Borrowed += r.Allowed
		u.BorrowedHits += r.AllowedCost
		u.Refused += r.Denied + r.Deferred
	})
	out := make([]PoolUsage, 0, len(sums))
	for _, u := range sums {
		out = append(out, *u)
	}
	slices.SortFunc(out, comparePools)
	return out, nil
}

// comparePools orders pools by domain and name (the ClickHouse query
// orders by domain and rule id, which sorts as the name within a domain
// only up to escapes: both stores sort the same way here).
func comparePools(a, b PoolUsage) int {
	return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Rule, b.Rule))
}
