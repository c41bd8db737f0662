package config

// The rule file's model: what a parsed file holds (files, descriptors,
// rate limits, throttles, pools, defer blocks) and its units.

import (
	"fmt"
	"time"
)

// Unit is the time unit of a rate limit, as in Envoy's ratelimit service.
type Unit int

// Units, with Envoy's lengths: a month is 30 days, a year 365 days.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = map[string]Unit{"second": Second, "minute": Minute, "hour": Hour, "day": Day,
	"week": Week, "month": Month, "year": Year}

// String returns the lowercase unit name used in rule files.
func (u Unit) String() string {
	for n, v := range unitNames {
		if v == u {
			return n
		}
	}
	return "unknown"
}

// Duration returns the length of one unit.
func (u Unit) Duration() time.Duration {
	d := 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return d
	case Week:
		return 7 * d
	case Month:
		return 30 * d
	case Year:
		return 365 * d
	}
	return 0
}

// Position is where a node was read.
type Position struct {
	File         string
	Line, Column int
}

func (p Position) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column) }

// RateLimit is a descriptor's rate_limit block. As in Envoy's service,
// name and replaces live here: a matched rule whose replaces lists another
// matched rule's name drops that rule for the request.
type RateLimit struct {
	Name            string
	Unit            Unit
	RequestsPerUnit int64 // 0 without an algorithm: refuse everything (Envoy's block)
	Unlimited       bool
	Replaces        []string
}

// Throttle is the velvetrope throttle extension.
type Throttle struct {
	Type           ThrottleType
	OveragePercent int64  // soft: admit up to limit × (1 + OveragePercent/100)
	Pool           string // elastic: the capacity pool borrowed from
	MaxMultiplier  int64  // elastic: never above limit × MaxMultiplier
}

// DeferSpec is where and how long deferred requests of an `on_exceed:
// defer` rule are kept and delivered.
type DeferSpec struct {
	Target          string        // base URL the drain delivers to (http or https)
	MaxAge          time.Duration // past it an item goes to the dead letters (10m)
	MaxAttempts     int           // deliveries tried before the dead letters (5)
	MaxPayloadBytes int64         // the largest payload a request may carry (64 KiB)
	// MaxQueued bounds the items queued for one counter key at once: past
	// it a request the rule would defer is refused. 0 in a file means the
	// default, DefaultMaxQueued, filled in when the rule is compiled.
	MaxQueued int64
}

// Defaults of a defer block.
const (
	DefaultDeferMaxAge       = 10 * time.Minute
	DefaultDeferMaxAttempts  = 5
	DefaultDeferPayloadBytes = 64 << 10
	// MaxDeferPayloadBytes bounds max_payload_bytes: an item is one Kafka
	// record.
	MaxDeferPayloadBytes = 512 << 10
	// MaxDeferQueued bounds max_queued, and DefaultDeferQueuedCap the
	// default DefaultMaxQueued computes.
	MaxDeferQueued        = 1_000_000
	DefaultDeferQueuedCap = 10_000
)

// DefaultMaxQueued is the items a deferring rule queues per key unless
// its defer block says otherwise: what the rule can release before an
// item's max_age runs out — its ceiling (or bucket) per window, for every
// window max_age touches — at most DefaultDeferQueuedCap and at least 1.
// An item queued beyond that would, live traffic aside, only wait out its
// age and expire into the dead letters.
func DefaultMaxQueued(r *Rule) int64 {
	per := max(r.Ceiling(), r.Capacity())
	if per <= 0 || r.Window <= 0 {
		return 1
	}
	windows := int64((r.Defer.MaxAge + r.Window - 1) / r.Window)
	if windows < 1 {
		windows = 1
	}
	if per >= DefaultDeferQueuedCap || windows >= DefaultDeferQueuedCap/per+1 {
		return DefaultDeferQueuedCap
	}
	return min(per*windows, DefaultDeferQueuedCap)
}

// Pool is a named capacity of a domain that elastic rules borrow from.
type Pool struct {
	Name      string
	RateLimit *RateLimit
	Pos       Position
}

// Descriptor is one node of a rule file's descriptor tree, as written.
type Descriptor struct {
	Key, Value     string
	RateLimit      *RateLimit
	ShadowMode     bool
	DetailedMetric bool
	ShareThreshold bool
	Descriptors    []*Descriptor
	// HashValues (velvetrope extension): this key's request values are
	// replaced by a keyed hash before they leave the checker.
	HashValues bool

	// velvetrope extensions; empty means the default.
	Algorithm Algorithm
	Burst     int64
	Throttle  Throttle
	OnExceed  OnExceed
	Mode      Mode
	NearLimit NearLimit
	Failure   FailurePolicy
	Shards    int64
	Defer     *DeferSpec // on_exceed: defer only
	// Plans (velvetrope extension): each client's limit is its plan's,
	// from a table of the rules store; the rate_limit is the limit of
	// clients without one.
	Plans *PlansSpec
	// Limits (velvetrope extension) are several limits in place of
	// RateLimit, each with its own counter; nil otherwise.
	Limits []*RateLimit
	// Concurrency (velvetrope extension) holds the descriptor to a number
	// of requests in flight, counted by leases; RateLimit is then derived
	// from it (concurrency.go).
	Concurrency *ConcurrencySpec
	// RLQS (velvetrope extension, top-level descriptors only) maps Envoy's
	// rate limit quota buckets to this descriptor (rlqs.go).
	RLQS *RLQSSpec

	Pos Position
}

// File is one parsed rule file.
type File struct {
	Path   string
	Domain string
	// Staged marks the rules of a staged version (the rules store's,
	// compiled under Domain + StagedSuffix by rulesync): only they may
	// have a domain with that suffix.
	Staged      bool
	Pools       []*Pool
	Descriptors []*Descriptor
	Pos         Position
}
