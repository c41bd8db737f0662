package httpjson

import "time"

// The analytics answers (GET /v1/analytics/...). Each decision a row
// counts is in one of Allowed, Denied, Deferred and ShadowDenied, as its
// caller was answered (a shadow rule's would-be refusal, admitted, is
// ShadowDenied and not Allowed); OverSoft and Elastic are of Allowed:
// admissions above the rule's own limit, within a soft throttle's overage
// or borrowing from a pool. Window is the window as the query gave it
// ("1h" when it gave none).

// TopDenied is the answer of GET /v1/analytics/top-denied: the keys most
// refused (denied + deferred) first.
type TopDenied struct {
	Window string     `json:"window"`
	Keys   []KeyUsage `json:"keys"`
}

// KeyUsage is one key's totals over a window: a row of [TopDenied].
type KeyUsage struct {
	Domain       string `json:"domain"`
	Rule         string `json:"rule"`
	Descriptor   string `json:"descriptor"` // the entries as key=value, joined by ","
	Denied       uint64 `json:"denied"`
	Allowed      uint64 `json:"allowed"`
	Deferred     uint64 `json:"deferred"`
	ShadowDenied uint64 `json:"shadow_denied"`
	OverSoft     uint64 `json:"over_soft"`
	Elastic      uint64 `json:"elastic"`
	Late         uint64 `json:"late"` // costs charged after the response (POST /v1/charge): no decision
}

// Usage is the answer of GET /v1/analytics/usage: one key's usage per
// minute.
type Usage struct {
	Window  string        `json:"window"`
	Domain  string        `json:"domain"`
	Key     string        `json:"key"`
	Minutes []MinuteUsage `json:"minutes"`
}

// Timeline is the answer of GET /v1/analytics/timeline: every key's usage
// per minute (the dashboard's chart).
type Timeline struct {
	Window  string        `json:"window"`
	Minutes []MinuteUsage `json:"minutes"`
}

// MinuteUsage is the usage of one minute (of a key, or of everything): a
// row of [Usage] and [Timeline]. AllowedCost and DeniedCost are the hits
// of the admitted and of the refused requests.
type MinuteUsage struct {
	Minute       time.Time `json:"minute"`
	Allowed      uint64    `json:"allowed"`
	Denied       uint64    `json:"denied"`
	Deferred     uint64    `json:"deferred"`
	ShadowDenied uint64    `json:"shadow_denied"`
	OverSoft     uint64    `json:"over_soft"`
	Elastic      uint64    `json:"elastic"`
	AllowedCost  uint64    `json:"allowed_cost"`
	DeniedCost   uint64    `json:"denied_cost"`
	Late         uint64    `json:"late"`      // costs charged after the response (POST /v1/charge): no decision
	LateCost     uint64    `json:"late_cost"` // their hits
}

// Rules is the answer of GET /v1/analytics/rules: every rule's totals.
type Rules struct {
	Window string      `json:"window"`
	Rules  []RuleUsage `json:"rules"`
}

// RuleUsage is one rule's totals and deny rate over a window: a row of
// [Rules].
type RuleUsage struct {
	Domain       string  `json:"domain"`
	Rule         string  `json:"rule"`
	Allowed      uint64  `json:"allowed"`
	Denied       uint64  `json:"denied"`
	Deferred     uint64  `json:"deferred"`
	ShadowDenied uint64  `json:"shadow_denied"`
	OverSoft     uint64  `json:"over_soft"`
	Elastic      uint64  `json:"elastic"`
	Late         uint64  `json:"late"`      // costs charged after the response: no decision
	DenyRate     float64 `json:"deny_rate"` // denied of every decision; 0 with no traffic
}

// Pools is the answer of GET /v1/analytics/pools: every elastic pool's
// borrowings.
type Pools struct {
	Window string      `json:"window"`
	Pools  []PoolUsage `json:"pools"`
}

// PoolUsage is one elastic pool's totals over a window: the admissions
// that borrowed from it (Borrowed) and their hits (BorrowedHits), and the
// borrowings it refused (Refused: the request was refused, its rule could
// not go above its own limit). A row of [Pools].
type PoolUsage struct {
	Domain       string `json:"domain"`
	Pool         string `json:"pool"`
	Rule         string `json:"rule"` // the pool's counter's rule id
	Borrowed     uint64 `json:"borrowed"`
	BorrowedHits uint64 `json:"borrowed_hits"`
	Refused      uint64 `json:"refused"`
}

// RuleChanges is the answer of GET /v1/analytics/rule-changes: the rules
// store's changes, newest first.
type RuleChanges struct {
	Window  string       `json:"window"`
	Changes []RuleChange `json:"changes"`
}

// RuleChange is one write to the rules store: which domain and version,
// the version it replaced (From, 0: none), the action (put, delete or
// rollback), who wrote it and why, the document's lines it added and
// removed, its size, and the checker that took it. A row of [RuleChanges].
type RuleChange struct {
	Time   time.Time `json:"time"`
	Domain string    `json:"domain"`
	// Table is set on a write to a client table of the domain (action
	// "clients"): Version and From are then the table's sequence numbers
	// (its changes ever written) after and before the write, Added the
	// clients given a plan and Removed those taken off one.
	Table    string `json:"table,omitempty"`
	Version  int64  `json:"version"`
	From     int64  `json:"from_version"`
	Action   string `json:"action"`
	Author   string `json:"author"`
	Message  string `json:"message"`
	Added    int    `json:"added"`
	Removed  int    `json:"removed"`
	Bytes    int    `json:"bytes"`
	Instance string `json:"instance"`
}
