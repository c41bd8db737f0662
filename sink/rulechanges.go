package sink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/velvetrope/velvetrope/httpjson"
)

// RuleChange is one write to the rules store, as the audit keeps it
// (httpjson's, the answer of GET /v1/analytics/rule-changes).
type RuleChange = httpjson.RuleChange

// RuleChangesQuery asks for the changes since Since, newest first,
// optionally of one domain, at most Limit.
type RuleChangesQuery struct {
	Since  time.Time
	Domain string
	Limit  int
}

// RuleAudit keeps the rules store's changes. [ClickHouse] and [Memory]
// implement it.
type RuleAudit interface {
	InsertRuleChange(ctx context.Context, c RuleChange) error
	RuleChanges(ctx context.Context, q RuleChangesQuery) ([]RuleChange, error)
}

func (q RuleChangesQuery) validate() error {
	if q.Limit < 1 || q.Limit > 1000 {
		return fmt.Errorf("sink: limit %d: want 1 to 1000", q.Limit)
	}
	return nil
}

// memoryRuleChanges is Memory's audit: the newest changes, bounded.
type memoryRuleChanges struct {
	mu      sync.Mutex
	changes []RuleChange // oldest first
}

// maxMemoryRuleChanges bounds dev's audit: far more than a dev session
// writes, little memory.
const maxMemoryRuleChanges = 10000

// InsertRuleChange implements RuleAudit.
func (m *Memory) InsertRuleChange(_ context.Context, c RuleChange) error {
	a := &m.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.changes { // a retried write is the same change, as in ClickHouse
		if a.changes[i].Domain == c.Domain && a.changes[i].Table == c.Table && a.changes[i].Version == c.Version {
			a.changes[i] = c
			return nil
		}
	}
	a.changes = append(a.changes, c)
	if len(a.changes) > maxMemoryRuleChanges {
		a.changes = append(a.changes[:0:0], a.changes[len(a.changes)-maxMemoryRuleChanges:]...)
	}
	return nil
}

// RuleChanges implements RuleAudit.
func (m *Memory) RuleChanges(_ context.Context, q RuleChangesQuery) ([]RuleChange, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	a := &m.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []RuleChange
	for i := len(a.changes) - 1; i >= 0 && len(out) < q.Limit; i-- {
		c := a.changes[i]
		if c.Time.Before(q.Since) || (q.Domain != "" && c.Domain != q.Domain) {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// InsertRuleChange implements RuleAudit. A change written twice (a
// retry) is one row: the table keeps one per domain and version.
func (c *ClickHouse) InsertRuleChange(ctx context.Context, ch RuleChange) error {
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	query := "INSERT INTO " + c.db + ".rule_changes (time, domain, version, from_version, action, author, message, added, removed, bytes, instance)"
	row := []any{ch.Time.UTC(), ch.Domain, uint64(ch.Version), uint64(ch.From), ch.Action, ch.Author, ch.Message,
		uint32(ch.Added), uint32(ch.Removed), uint64(ch.Bytes), ch.Instance}
	if ch.Table != "" { // a client table's write: its own table, keyed by its sequence numbers
		query = "INSERT INTO " + c.db + ".client_changes (time, domain, table_name, seq, from_seq, action, author, message, added, removed, instance)"
		row = []any{ch.Time.UTC(), ch.Domain, ch.Table, uint64(ch.Version), uint64(ch.From), ch.Action, ch.Author, ch.Message,
			uint32(ch.Added), uint32(ch.Removed), ch.Instance}
	}
	b, err := c.conn.PrepareBatch(ctx, query)
	if err != nil {
		return fmt.Errorf("sink: insert rule change: %w", err)
	}
	if err := b.Append(row...); err != nil {
		_ = b.Abort()
		return fmt.Errorf("sink: insert rule change: %w", err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("sink: insert rule change: %w", err)
	}
	return nil
}

// RuleChanges implements RuleAudit.
func (c *ClickHouse) RuleChanges(ctx context.Context, q RuleChangesQuery) ([]RuleChange, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	if err := c.Migrate(ctx); err != nil {
		return nil, err
	}
	where, args := "time >= ?", []any{q.Since.UTC()}
	if q.Domain != "" {
		where, args = where+" AND domain = ?", append(args, q.Domain)
	}
	// the documents' changes and the client tables' in one list
	rows, err := c.conn.Query(ctx, "SELECT time, domain, tbl, version, from_version, action, author, message, added, removed, bytes, instance FROM ("+
		"SELECT time, domain, '' AS tbl, version, from_version, action, author, message, added, removed, bytes, instance "+
		"FROM "+c.db+".rule_changes FINAL WHERE "+where+
		" UNION ALL SELECT time, domain, table_name AS tbl, seq AS version, from_seq AS from_version, action, author, message, added, removed, "+
		"toUInt64(0) AS bytes, instance FROM "+c.db+".client_changes FINAL WHERE "+where+
		") ORDER BY time DESC, domain, tbl, version DESC LIMIT "+fmt.Sprint(q.Limit), append(args, args...)...)
	if err != nil {
		return nil, fmt.Errorf("sink: rule changes: %w", err)
	}
	defer rows.Close()
	var out []RuleChange
	for rows.Next() {
		var r RuleChange
		var version, from, bytes uint64
		var added, removed uint32
		if err := rows.Scan(&r.Time, &r.Domain, &r.Table, &version, &from, &r.Action, &r.Author, &r.Message, &added, &removed, &bytes, &r.Instance); err != nil {
			return nil, fmt.Errorf("sink: rule changes: %w", err)
		}
		r.Version, r.From, r.Added, r.Removed, r.Bytes = int64(version), int64(from), int(added), int(removed), int(bytes)
		out = append(out, r)
	}
	return out, rows.Err()
}
