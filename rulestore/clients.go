package rulestore

// Client tables (docs/rules.md, "Per-client limits"): per domain, named
// tables that give clients a plan. A table is kept apart from the rules
// documents, since it may hold ten million clients and changes one
// client at a time: a write is a batch of changes that takes a sequence
// number, and a bounded log of recent batches lets followers apply them
// in order without reading the table again.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/config"
)

// ClientChange sets one client's plan in a table. Plan "" removes the
// client, who is then held to the rule's own limit.
type ClientChange struct {
	// Client is the client's values, in the order of the rule's path
	// entries without a fixed value (one value for a rule on one key).
	Client []string `json:"client"`
	Plan   string   `json:"plan"`
}

// ClientBatch is one write's changes, in order, and the sequence number
// the table reached with it.
type ClientBatch struct {
	Seq     int64
	Changes []ClientChange
}

// TableInfo is a client table's summary.
type TableInfo struct {
	Domain string `json:"domain"`
	Table  string `json:"table"`
	// Seq counts the changes ever written to the table.
	Seq     int64    `json:"seq"`
	Clients int64    `json:"clients"`
	Plans   []string `json:"plans"` // the plans some client is on, sorted
}

// ErrClientLogGap is ClientChanges' answer to a follower that fell
// further behind than the log keeps: it must scan the table again.
var ErrClientLogGap = errors.New("rulestore: the client table's log no longer holds the changes after this point: scan the table again")

// Bounds of client tables.
const (
	// MaxClientChanges bounds one write.
	MaxClientChanges = 10000
	// MaxClientValues bounds a client's values, MaxClientValueBytes each.
	MaxClientValues     = config.MaxClientValues
	MaxClientValueBytes = 1024
	// ClientLogChanges is how many recent changes a table's log keeps at
	// least: a follower that falls further behind scans the table again.
	ClientLogChanges = 100_000
)

// clientBackend is where client tables live; every call is atomic for
// one table.
type clientBackend interface {
	// setClients applies a batch of changes (fields encoded) and returns
	// the table's new sequence number; a batch that would take the table
	// past maxPlans plan names changes nothing (a *InputError).
	setClients(ctx context.Context, domain, table string, fields, plans []string, maxPlans int) (int64, error)
	clientPlan(ctx context.Context, domain, table, field string) (string, bool, error)
	// scanClients calls fn for every client and returns the sequence
	// number read before the scan: the log's batches after it cover what
	// the scan may have missed.
	scanClients(ctx context.Context, domain, table string, fn func(field, plan string) error) (int64, error)
	// clientLog returns batches after seq after, waiting up to wait for one.
	clientLog(ctx context.Context, domain, table string, after int64, wait time.Duration) ([]rawBatch, error)
	tableInfo(ctx context.Context, domain, table string) (seq, clients int64, plans []string, err error)
}

// rawBatch is a batch as logged: the sequence number before and after
// it, and its changes encoded (appendChange).
type rawBatch struct {
	prev, seq int64
	payload   []byte
}

// SetClients writes a batch of changes to a table, in order, and returns
// the table's sequence number after it.
func (s *Store) SetClients(ctx context.Context, domain, table string, changes []ClientChange) (int64, error) {
	if err := checkTable(domain, table); err != nil {
		return 0, err
	}
	switch {
	case len(changes) == 0:
		return 0, &InputError{"changes", "no changes"}
	case len(changes) > MaxClientChanges:
		return 0, &InputError{"changes", fmt.Sprintf("%d changes, more than %d in one write", len(changes), MaxClientChanges)}
	}
	fields := make([]string, len(changes))
	plans := make([]string, len(changes))
	for i, c := range changes {
		where := "changes[" + strconv.Itoa(i) + "]"
		if err := checkClient(where+".client", c.Client); err != nil {
			return 0, err
		}
		if c.Plan != "" {
			if err := config.CheckPlanName(c.Plan); err != nil {
				return 0, &InputError{where + ".plan", err.Error()}
			}
		}
		fields[i], plans[i] = EncodeClient(c.Client), c.Plan
	}
	seq, err := s.clients().setClients(ctx, domain, table, fields, plans, config.MaxPlansPerTable)
	if err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			return 0, err
		}
		return 0, fmt.Errorf("rulestore: write clients of %s/%s: %w", domain, table, err)
	}
	return seq, nil
}

// ClientPlan returns a client's plan in a table; false when it has none.
func (s *Store) ClientPlan(ctx context.Context, domain, table string, client []string) (string, bool, error) {
	if err := checkTable(domain, table); err != nil {
		return "", false, err
	}
	if err := checkClient("client", client); err != nil {
		return "", false, err
	}
	p, ok, err := s.clients().clientPlan(ctx, domain, table, EncodeClient(client))
	if err != nil {
		return "", false, fmt.Errorf("rulestore: read a client of %s/%s: %w", domain, table, err)
	}
	return p, ok, nil
}

// ScanClients calls fn for every client of a table, and returns the
// sequence number from which ClientChanges brings the scan up to date
// (changes written during the scan may or may not have been seen by it;
// applying them again in order is harmless).
func (s *Store) ScanClients(ctx context.Context, domain, table string, fn func(ClientChange) error) (int64, error) {
	if err := checkTable(domain, table); err != nil {
		return 0, err
	}
	seq, err := s.clients().scanClients(ctx, domain, table, func(field, plan string) error {
		vals, err := DecodeClient(field)
		if err != nil {
			return fmt.Errorf("stored client %q: %w", field, err)
		}
		return fn(ClientChange{Client: vals, Plan: plan})
	})
	if err != nil {
		return 0, fmt.Errorf("rulestore: scan clients of %s/%s: %w", domain, table, err)
	}
	return seq, nil
}

// ClientChanges returns the batches written to a table after sequence
// number after, in order, waiting up to wait for one when there are
// none yet. ErrClientLogGap: the log no longer reaches back to after.
func (s *Store) ClientChanges(ctx context.Context, domain, table string, after int64, wait time.Duration) ([]ClientBatch, error) {
	if err := checkTable(domain, table); err != nil {
		return nil, err
	}
	raw, err := s.clients().clientLog(ctx, domain, table, after, wait)
	if err != nil {
		if errors.Is(err, ErrClientLogGap) {
			return nil, err
		}
		return nil, fmt.Errorf("rulestore: read the client log of %s/%s: %w", domain, table, err)
	}
	out := make([]ClientBatch, 0, len(raw))
	prev := after
	for _, rb := range raw {
		if rb.prev != prev {
			return nil, ErrClientLogGap
		}
		b := ClientBatch{Seq: rb.seq}
		for p := rb.payload; len(p) > 0; {
			field, plan, rest, err := readChange(p)
			if err != nil {
				return nil, fmt.Errorf("rulestore: client log of %s/%s at %d: %w", domain, table, rb.seq, err)
			}
			vals, err := DecodeClient(field)
			if err != nil {
				return nil, fmt.Errorf("rulestore: client log of %s/%s at %d: %w", domain, table, rb.seq, err)
			}
			b.Changes = append(b.Changes, ClientChange{Client: vals, Plan: plan})
			p = rest
		}
		out = append(out, b)
		prev = rb.seq
	}
	return out, nil
}

// Table returns a client table's summary (a table never written has
// sequence number 0 and no clients).
func (s *Store) Table(ctx context.Context, domain, table string) (TableInfo, error) {
	if err := checkTable(domain, table); err != nil {
		return TableInfo{}, err
	}
	seq, n, plans, err := s.clients().tableInfo(ctx, domain, table)
	if err != nil {
		return TableInfo{}, fmt.Errorf("rulestore: read table %s/%s: %w", domain, table, err)
	}
	slices.Sort(plans)
	return TableInfo{Domain: domain, Table: table, Seq: seq, Clients: n, Plans: plans}, nil
}

func (s *Store) clients() clientBackend { return s.b.(clientBackend) }

func checkTable(domain, table string) error {
	if err := checkDomain(domain); err != nil {
		return err
	}
	if err := config.CheckPlanName(table); err != nil {
		return &InputError{"table", err.Error()}
	}
	return nil
}

func checkClient(field string, vals []string) error {
	switch {
	case len(vals) == 0:
		return &InputError{field, "no values (a client is the request's values of the rule's entries without a fixed value)"}
	case len(vals) > MaxClientValues:
		return &InputError{field, fmt.Sprintf("%d values, more than %d", len(vals), MaxClientValues)}
	}
	for i, v := range vals {
		switch {
		case v == "":
			return &InputError{field + "[" + strconv.Itoa(i) + "]", "is empty"}
		case len(v) > MaxClientValueBytes:
			return &InputError{field + "[" + strconv.Itoa(i) + "]", fmt.Sprintf("is %d bytes, more than %d", len(v), MaxClientValueBytes)}
		case !utf8.ValidString(v):
			return &InputError{field + "[" + strconv.Itoa(i) + "]", "is not UTF-8 text: invalid byte at offset " + strconv.Itoa(invalidUTF8(v))}
		}
	}
	return nil
}

// EncodeClient is a client's values as one string: each value's length
// (a uvarint) and its bytes. No value can stand for two.
func EncodeClient(vals []string) string {
	var b []byte
	for _, v := range vals {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return string(b)
}

// DecodeClient is EncodeClient's inverse; an error for a string no
// client encodes to.
func DecodeClient(s string) ([]string, error) {
	var out []string
	for len(s) > 0 {
		n, k := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
		// a length written in more bytes than it needs is not ours either:
		// one client, one encoding
		if k <= 0 || k != len(binary.AppendUvarint(nil, n)) || n == 0 || n > uint64(len(s)-k) || len(out) == MaxClientValues {
			return nil, errors.New("not an encoded client")
		}
		out = append(out, s[k:k+int(n)])
		s = s[k+int(n):]
	}
	if len(out) == 0 {
		return nil, errors.New("not an encoded client")
	}
	return out, nil
}

// appendChange encodes one change of a batch for the log.
func appendChange(b []byte, field, plan string) []byte {
	b = binary.AppendUvarint(b, uint64(len(field)))
	b = append(b, field...)
	b = binary.AppendUvarint(b, uint64(len(plan)))
	return append(b, plan...)
}

func readChange(p []byte) (field, plan string, rest []byte, err error) {
	read := func() (string, bool) {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return "", false
		}
		s := string(p[k : k+int(n)])
		p = p[k+int(n):]
		return s, true
	}
	f, ok1 := read()
	pl, ok2 := read()
	if !ok1 || !ok2 {
		return "", "", nil, errors.New("a damaged batch")
	}
	return f, pl, p, nil
}
