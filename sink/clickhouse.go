package sink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/velvetrope/velvetrope/config"
)

// ClickHouseConfig addresses the analytics database.
type ClickHouseConfig struct {
	Addr               string
	Database           string // created if missing ("velvetrope")
	Username, Password string // "default", ""; the password is never logged
	TLS                *tls.Config
	// RetentionDays sets a TTL on the usage table where the server
	// supports one (0: keep everything); servers without TTL (18.16) log
	// that retention is skipped.
	RetentionDays int
	DialTimeout   time.Duration // 5 s
	Logger        *slog.Logger
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ClickHouse is the Store over a ClickHouse server. It connects lazily
// and migrates the schema before its first write or query, so a process
// starts while ClickHouse is down and catches up when it returns.
type ClickHouse struct {
	cfg  ClickHouseConfig
	conn driver.Conn
	db   string // quoted database name

	mu       sync.Mutex // one migration at a time
	migrated bool
}

// NewClickHouse returns the store; it does not connect yet.
func NewClickHouse(cfg ClickHouseConfig) (*ClickHouse, error) {
	if cfg.Addr == "" {
		return nil, errors.New("sink: clickhouse.addr is required")
	}
	if cfg.Database == "" {
		cfg.Database = "velvetrope"
	}
	if !identifier.MatchString(cfg.Database) {
		return nil, fmt.Errorf("sink: clickhouse.database %q: want letters, digits and _ (not starting with a digit)", cfg.Database)
	}
	if cfg.Username == "" {
		cfg.Username = "default"
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{cfg.Addr}, TLS: cfg.TLS,
		Auth:        clickhouse.Auth{Database: "default", Username: cfg.Username, Password: cfg.Password},
		DialTimeout: cfg.DialTimeout, MaxOpenConns: 8, MaxIdleConns: 4})
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	return &ClickHouse{cfg: cfg, conn: conn, db: "`" + cfg.Database + "`"}, nil
}

// Close closes the connections.
func (c *ClickHouse) Close() error { return c.conn.Close() }

// Ping checks the server answers.
func (c *ClickHouse) Ping(ctx context.Context) error { return c.conn.Ping(ctx) }

// migration is one versioned, idempotent schema step: its statements,
// then the columns it adds to usage_minute (each added unless the table
// has it already: 18.16 knows no ADD COLUMN IF NOT EXISTS).
type migration struct {
	version int
	name    string
	stmts   []string // %[1]s is the quoted database
	columns []column
}

// column is a column a migration adds: its name, and its type with the
// DEFAULT that rows written before it read as.
type column struct{ name, decl string }

// migrations, in order. Never edit one that has shipped: add another.
var migrations = []migration{
	{1, "usage_minute", []string{
		`CREATE TABLE IF NOT EXISTS %[1]s.usage_minute (
			minute DateTime,
			domain String,
			rule String,
			descriptor String,
			instance String,
			stream UInt64,
			version UInt64,
			allowed UInt64,
			denied UInt64,
			deferred UInt64,
			shadow_denied UInt64,
			allowed_cost UInt64,
			denied_cost UInt64
		) ENGINE = ReplacingMergeTree(version)
		PARTITION BY toYYYYMMDD(minute)
		ORDER BY (domain, minute, rule, descriptor, instance, stream)`,
	}, nil},
	// Admissions above a rule's own limit, and pools' rows told apart.
	// Rows written before read over_soft and elastic as 0 (they were not
	// counted), and pool from their rule id, as config.PoolOf reads it:
	// the id is the escaped domain (a backslash before \ / : = |), then
	// ":#pool:" (sink tests hold the two equal).
	{2, "usage_minute over_soft, elastic, pool", nil, []column{
		{"over_soft", "UInt64 DEFAULT 0"},
		{"elastic", "UInt64 DEFAULT 0"},
		{"pool", `UInt8 DEFAULT position(rule, concat(replaceRegexpAll(domain, '[\\\\/:=|]', '\\\\\\0'), ':#pool:')) = 1`},
	}},
	// The rules store's audit: one row per domain and version (a retried
	// insert is the same row).
	{3, "rule_changes", []string{
		`CREATE TABLE IF NOT EXISTS %[1]s.rule_changes (
			time DateTime,
			domain String,
			version UInt64,
			from_version UInt64,
			action String,
			author String,
			message String,
			added UInt32,
			removed UInt32,
			bytes UInt64,
			instance String
		) ENGINE = ReplacingMergeTree()
		PARTITION BY toYYYYMM(time)
		ORDER BY (domain, version)`,
	}, nil},
	// Writes to client tables (per-client limits), audited beside the
	// rules documents: one row per domain, table and sequence number.
	{4, "client_changes", []string{
		`CREATE TABLE IF NOT EXISTS %[1]s.client_changes (
			time DateTime,
			domain String,
			table_name String,
			seq UInt64,
			from_seq UInt64,
			action String,
			author String,
			message String,
			added UInt32,
			removed UInt32,
			instance String
		) ENGINE = ReplacingMergeTree()
		PARTITION BY toYYYYMM(time)
		ORDER BY (domain, table_name, seq)`,
	}, nil},
	// Costs charged after the response (POST /v1/charge): rows written
	// before had none.
	{5, "usage_minute late, late_cost", nil, []column{
		{"late", "UInt64 DEFAULT 0"},
		{"late_cost", "UInt64 DEFAULT 0"},
	}},
}

// Migrate creates the database and applies the migrations it has not
// recorded yet (each is idempotent: two processes migrating at once
// agree), then applies the retention where the server supports it.
func (c *ClickHouse) Migrate(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.migrated {
		return nil
	}
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS " + c.db,
		"CREATE TABLE IF NOT EXISTS " + c.db + ".schema_migrations (version UInt32, name String, applied_at DateTime) " +
			"ENGINE = ReplacingMergeTree() ORDER BY version",
	} {
		if err := c.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("sink: migrating %s: %w", c.cfg.Database, err)
		}
	}
	done := map[uint32]bool{}
	rows, err := c.conn.Query(ctx, "SELECT version FROM "+c.db+".schema_migrations FINAL")
	if err != nil {
		return fmt.Errorf("sink: reading migrations: %w", err)
	}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("sink: reading migrations: %w", err)
		}
		done[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sink: reading migrations: %w", err)
	}
	for _, m := range migrations {
		if done[uint32(m.version)] {
			continue
		}
		for _, s := range m.stmts {
			if err := c.conn.Exec(ctx, fmt.Sprintf(s, c.db)); err != nil {
				return fmt.Errorf("sink: migration %d (%s): %w", m.version, m.name, err)
			}
		}
		for _, col := range m.columns {
			if err := c.addColumn(ctx, col); err != nil {
				return fmt.Errorf("sink: migration %d (%s): column %s: %w", m.version, m.name, col.name, err)
			}
		}
		if err := c.record(ctx, m); err != nil {
			return fmt.Errorf("sink: recording migration %d: %w", m.version, err)
		}
		c.cfg.Logger.Info("ClickHouse migration applied", "database", c.cfg.Database, "version", m.version, "name", m.name)
	}
	c.retention(ctx)
	c.migrated = true
	return nil
}

// addColumn adds col to usage_minute unless the table has it: a process
// that migrated at the same time may have added it (then the ALTER fails,
// and the column is there).
func (c *ClickHouse) addColumn(ctx context.Context, col column) error {
	has := func() (bool, error) {
		var n uint64
		err := c.conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = 'usage_minute' AND name = ?",
			c.cfg.Database, col.name).Scan(&n)
		return n > 0, err
	}
	if ok, err := has(); err != nil || ok {
		return err
	}
	err := c.conn.Exec(ctx, "ALTER TABLE "+c.db+".usage_minute ADD COLUMN "+col.name+" "+col.decl)
	if err != nil {
		if ok, _ := has(); ok {
			return nil
		}
	}
	return err
}

// record notes m as applied, as a batch (an INSERT … VALUES with bound
// parameters through Exec never returns on the 18.16 server).
func (c *ClickHouse) record(ctx context.Context, m migration) error {
	b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.db+".schema_migrations (version, name, applied_at)")
	if err != nil {
		return err
	}
	if err := b.Append(uint32(m.version), m.name, time.Now().UTC()); err != nil {
		_ = b.Abort()
		return err
	}
	return b.Send()
}

// retention sets the usage table's TTL; a server without TTL support
// refuses the statement, which is logged and skipped.
func (c *ClickHouse) retention(ctx context.Context) {
	if c.cfg.RetentionDays <= 0 {
		return
	}
	q := fmt.Sprintf("ALTER TABLE %s.usage_minute MODIFY TTL minute + INTERVAL %d DAY", c.db, c.cfg.RetentionDays)
	if err := c.conn.Exec(ctx, q); err != nil {
		c.cfg.Logger.Info("ClickHouse retention skipped: this server does not take a table TTL; old rows stay until dropped by hand",
			"days", c.cfg.RetentionDays, "error", firstLine(err))
		return
	}
	c.cfg.Logger.Info("ClickHouse retention set", "days", c.cfg.RetentionDays)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// Insert implements Store: one batch insert, naming its columns (the 18.16
// server needs the list for clickhouse-go's batches).
func (c *ClickHouse) Insert(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.db+".usage_minute (minute, domain, rule, descriptor, instance, stream, "+
		"version, allowed, denied, deferred, shadow_denied, over_soft, elastic, allowed_cost, denied_cost, pool, late, late_cost)")
	if err != nil {
		return fmt.Errorf("sink: insert: %w", err)
	}
	for i := range rows {
		r := &rows[i]
		var pool uint8
		if r.Pool {
			pool = 1
		}
		if err := b.Append(time.Unix(r.Minute, 0).UTC(), r.Domain, r.Rule, r.Descriptor, r.Instance, r.Stream, r.Version,
			r.Allowed, r.Denied, r.Deferred, r.ShadowDenied, r.OverSoft, r.Elastic, r.AllowedCost, r.DeniedCost, pool, r.Late, r.LateCost); err != nil {
			_ = b.Abort()
			return fmt.Errorf("sink: insert: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("sink: insert: %w", err)
	}
	return nil
}

// The queries read the newest version of every row (FINAL) and bind every
// value the caller gives as a positional parameter; only the database
// name, checked at construction, is part of the text.

// TopDenied implements Analytics.
func (c *ClickHouse) TopDenied(ctx context.Context, q TopQuery) ([]KeyUsage, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	if err := c.Migrate(ctx); err != nil {
		return nil, err
	}
	rows, err := c.conn.Query(ctx, `SELECT domain, rule, descriptor, sum(denied) AS d, sum(allowed) AS a, sum(deferred) AS f,
			sum(shadow_denied), sum(over_soft), sum(elastic), sum(late)
		FROM `+c.db+`.usage_minute FINAL
		WHERE minute >= toDateTime(?) AND pool = 0 AND (? = '' OR domain = ?) AND (? = '' OR rule = ?)
		GROUP BY domain, rule, descriptor
		HAVING d + f > 0
		ORDER BY d + f DESC, d DESC, domain, rule, descriptor
		LIMIT ?`, q.Since.Unix(), q.Domain, q.Domain, q.Rule, q.Rule, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("sink: top denied: %w", err)
	}
	defer rows.Close()
	out := []KeyUsage{}
	for rows.Next() {
		var u KeyUsage
		if err := rows.Scan(&u.Domain, &u.Rule, &u.Descriptor, &u.Denied, &u.Allowed, &u.Deferred,
			&u.ShadowDenied, &u.OverSoft, &u.Elastic, &u.Late); err != nil {
			return nil, fmt.Errorf("sink: top denied: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// Usage implements Analytics.
func (c *ClickHouse) Usage(ctx context.Context, q UsageQuery) ([]MinuteUsage, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	return c.perMinute(ctx, "usage", `domain = ? AND descriptor = ? AND (? = '' OR rule = ?)`,
		q.Since, q.Domain, q.Descriptor, q.Rule, q.Rule)
}

// Timeline implements Analytics.
func (c *ClickHouse) Timeline(ctx context.Context, q TimelineQuery) ([]MinuteUsage, error) {
	return c.perMinute(ctx, "timeline", `(? = '' OR domain = ?)`, q.Since, q.Domain, q.Domain)
}

func (c *ClickHouse) perMinute(ctx context.Context, what, where string, since time.Time, args ...any) ([]MinuteUsage, error) {
	if err := c.Migrate(ctx); err != nil {
		return nil, err
	}
	rows, err := c.conn.Query(ctx, `SELECT toUInt32(minute) AS m, sum(allowed), sum(denied), sum(deferred), sum(shadow_denied),
			sum(over_soft), sum(elastic), sum(allowed_cost), sum(denied_cost), sum(late), sum(late_cost)
		FROM `+c.db+`.usage_minute FINAL
		WHERE minute >= toDateTime(?) AND pool = 0 AND `+where+`
		GROUP BY m
		ORDER BY m`, append([]any{since.Unix()}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("sink: %s: %w", what, err)
	}
	defer rows.Close()
	out := []MinuteUsage{}
	for rows.Next() {
		var m uint32
		var u MinuteUsage
		if err := rows.Scan(&m, &u.Allowed, &u.Denied, &u.Deferred, &u.ShadowDenied, &u.OverSoft, &u.Elastic,
			&u.AllowedCost, &u.DeniedCost, &u.Late, &u.LateCost); err != nil {
			return nil, fmt.Errorf("sink: %s: %w", what, err)
		}
		u.Minute = time.Unix(int64(m), 0).UTC()
		out = append(out, u)
	}
	return out, rows.Err()
}

// Rules implements Analytics.
func (c *ClickHouse) Rules(ctx context.Context, q RulesQuery) ([]RuleUsage, error) {
	if err := c.Migrate(ctx); err != nil {
		return nil, err
	}
	rows, err := c.conn.Query(ctx, `SELECT domain, rule, sum(allowed), sum(denied), sum(deferred), sum(shadow_denied),
			sum(over_soft), sum(elastic), sum(late)
		FROM `+c.db+`.usage_minute FINAL
		WHERE minute >= toDateTime(?) AND pool = 0 AND (? = '' OR domain = ?)
		GROUP BY domain, rule
		ORDER BY domain, rule`, q.Since.Unix(), q.Domain, q.Domain)
	if err != nil {
		return nil, fmt.Errorf("sink: rules: %w", err)
	}
	defer rows.Close()
	out := []RuleUsage{}
	for rows.Next() {
		var u RuleUsage
		if err := rows.Scan(&u.Domain, &u.Rule, &u.Allowed, &u.Denied, &u.Deferred, &u.ShadowDenied,
			&u.OverSoft, &u.Elastic, &u.Late); err != nil {
			return nil, fmt.Errorf("sink: rules: %w", err)
		}
		u.DenyRate = DenyRate(u.Allowed, u.Denied, u.Deferred, u.ShadowDenied)
		out = append(out, u)
	}
	return out, rows.Err()
}

// Pools implements Analytics.
func (c *ClickHouse) Pools(ctx context.Context, q PoolsQuery) ([]PoolUsage, error) {
	if err := c.Migrate(ctx); err != nil {
		return nil, err
	}
	rows, err := c.conn.Query(ctx, `SELECT domain, rule, sum(allowed), sum(allowed_cost), sum(denied) + sum(deferred)
		FROM `+c.db+`.usage_minute FINAL
		WHERE minute >= toDateTime(?) AND pool = 1 AND (? = '' OR domain = ?)
		GROUP BY domain, rule`, q.Since.Unix(), q.Domain, q.Domain)
	if err != nil {
		return nil, fmt.Errorf("sink: pools: %w", err)
	}
	defer rows.Close()
	out := []PoolUsage{}
	for rows.Next() {
		var u PoolUsage
		if err := rows.Scan(&u.Domain, &u.Rule, &u.Borrowed, &u.BorrowedHits, &u.Refused); err != nil {
			return nil, fmt.Errorf("sink: pools: %w", err)
		}
		u.Pool, _ = config.PoolOf(u.Rule)
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sink: pools: %w", err)
	}
	slices.SortFunc(out, comparePools)
	return out, nil
}
