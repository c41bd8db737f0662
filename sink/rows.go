package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/httpjson"
)

// Row is one stream's usage of one counter in one minute, up to Version.
//
// Each decision is in one of Allowed, Denied, Deferred and ShadowDenied,
// as its caller was answered (a shadow rule's would-be refusal, admitted,
// is ShadowDenied and not Allowed); OverSoft and Elastic are of Allowed:
// admissions above the rule's own limit, within a soft throttle's overage
// or borrowing from a pool. A pool's row (Pool) counts the admissions
// that borrowed from it as Allowed (their hits AllowedCost) and the
// borrowings it refused as Denied.
type Row struct {
	Minute     int64 // unix seconds, a multiple of 60
	Domain     string
	Rule       string
	Descriptor string // "key=value" entries joined by ","
	Instance   string
	Stream     uint64
	Version    uint64 // the sequence of the delta it was taken from

	Allowed, Denied, Deferred, ShadowDenied uint64
	OverSoft, Elastic                       uint64
	AllowedCost, DeniedCost                 uint64
	// Late counts costs charged after the response (no decision, in none
	// of the counts above), LateCost their hits.
	Late, LateCost uint64
	// Pool marks the row of an elastic pool's counter (config.PoolOf of
	// Rule): not a key of any client's.
	Pool bool
}

// rowKey names a row; versions of one row share it.
type rowKey struct {
	minute                             int64
	domain, rule, descriptor, instance string
	stream                             uint64
}

func (r *Row) key() rowKey {
	return rowKey{r.Minute, r.Domain, r.Rule, r.Descriptor, r.Instance, r.Stream}
}

// RowOf returns the row a delta carries; false for a delta without minute
// usage (from a checker older than the field).
func RowOf(d *eventsv1.Delta) (Row, bool) {
	m := d.GetMinute()
	if m == nil {
		return Row{}, false
	}
	_, pool := config.PoolOf(d.RuleId)
	return Row{Minute: m.MinuteUnix, Domain: d.Domain, Rule: d.RuleId, Descriptor: d.DescriptorText,
		Instance: d.InstanceId, Stream: m.Stream, Version: d.Sequence,
		Allowed: m.AllowedCount, Denied: m.DeniedCount, Deferred: m.DeferredCount, ShadowDenied: m.ShadowDeniedCount,
		OverSoft: m.OverSoftCount, Elastic: m.ElasticCount,
		AllowedCost: m.AllowedCost, DeniedCost: m.DeniedCost, Late: m.LateCount, LateCost: m.LateCost, Pool: pool}, true
}

// Store keeps rows (the newest version of each) and answers the queries.
// [ClickHouse] and [Memory] implement it.
type Store interface {
	// Insert writes rows; a row whose key exists keeps the higher version.
	Insert(ctx context.Context, rows []Row) error
	Analytics
}

// Analytics answers the analytics queries. Pools' rows are answered by
// Pools only: they are no client's key, and a borrowing request is
// counted under its rule already.
type Analytics interface {
	// TopDenied lists the keys most refused (denied + deferred) since
	// q.Since, keys with neither left out.
	TopDenied(ctx context.Context, q TopQuery) ([]KeyUsage, error)
	Usage(ctx context.Context, q UsageQuery) ([]MinuteUsage, error)
	Rules(ctx context.Context, q RulesQuery) ([]RuleUsage, error)
	Timeline(ctx context.Context, q TimelineQuery) ([]MinuteUsage, error)
	// Pools lists every pool's borrowings since q.Since.
	Pools(ctx context.Context, q PoolsQuery) ([]PoolUsage, error)
}

// TopQuery asks for the most denied keys since Since, optionally within a
// domain and a rule, at most Limit of them.
type TopQuery struct {
	Since        time.Time
	Domain, Rule string // empty: any
	Limit        int
}

// KeyUsage is one key's totals over a window (the counts of [Row]): the
// rows of the top-denied answer, as the API writes them.
type KeyUsage = httpjson.KeyUsage

// UsageQuery asks for one key's usage per minute since Since.
type UsageQuery struct {
	Since      time.Time
	Domain     string
	Descriptor string // the key, as "k=v[,k2=v2]"
	Rule       string // empty: any
}

// MinuteUsage is the usage of one minute (of a key, or of everything),
// the counts of [Row]: the rows of the usage and timeline answers, as the
// API writes them.
type MinuteUsage = httpjson.MinuteUsage

// RulesQuery asks for every rule's totals since Since.
type RulesQuery struct {
	Since  time.Time
	Domain string // empty: any
}

// RuleUsage is one rule's totals (the counts of [Row]) and deny rate
// ([DenyRate]) over a window: the rows of the rules answer, as the API
// writes them.
type RuleUsage = httpjson.RuleUsage

// PoolsQuery asks for every pool's totals since Since.
type PoolsQuery struct {
	Since  time.Time
	Domain string // empty: any
}

// PoolUsage is one elastic pool's totals over a window: the admissions
// that borrowed from it and their hits, and the borrowings it refused
// (the request was refused: its rule could not go above its own limit).
// The rows of the pools answer, as the API writes them.
type PoolUsage = httpjson.PoolUsage

// TimelineQuery asks for the usage of everything per minute since Since.
type TimelineQuery struct {
	Since  time.Time
	Domain string // empty: any
}

// MaxTopLimit bounds TopQuery.Limit.
const MaxTopLimit = 1000

// validate checks the query fields every store needs.
func (q *TopQuery) validate() error {
	if q.Limit < 1 || q.Limit > MaxTopLimit {
		return fmt.Errorf("limit: want 1 to %d, got %d", MaxTopLimit, q.Limit)
	}
	return nil
}

func (q *UsageQuery) validate() error {
	switch {
	case q.Domain == "":
		return errors.New("domain: must not be empty")
	case q.Descriptor == "":
		return errors.New("key: must not be empty")
	}
	return nil
}

// DenyRate is the share of decisions refused: denied of every decision,
// allowed, denied, deferred and shadow-denied (0 with none).
func DenyRate(allowed, denied, deferred, shadowDenied uint64) float64 {
	if n := allowed + denied + deferred + shadowDenied; n > 0 {
		return float64(denied) / float64(n)
	}
	return 0
}
