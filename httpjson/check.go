package httpjson

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Domain      string       `json:"domain"`
	Descriptors []Descriptor `json:"descriptors"`
	// Hits is the cost; missing means 1, an explicit 0 is a probe.
	Hits      *int64 `json:"hits,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// Payload is the work a deferred request carries to the rule's target
	// (read only when the decision is defer).
	Payload *Payload `json:"payload,omitempty"`
}

// Descriptor is one descriptor of a [CheckRequest].
type Descriptor struct {
	Entries []Entry `json:"entries"`
	// Hits, when present, is this descriptor's cost instead of the
	// request's.
	Hits *int64 `json:"hits,omitempty"`
}

// Entry is one key=value pair of a [Descriptor].
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Payload is the work a deferred request carries: what the drain sends to
// the rule's target. Body is text; BodyBase64 carries binary bodies (one
// of them at most). The deferred queue stores it as it came (package
// deferred's Payload is this type, with its checks).
type Payload struct {
	Method     string            `json:"method,omitempty"` // default POST
	Path       string            `json:"path,omitempty"`   // joined to the target; default /
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
}

// CheckResponse is the answer of POST /v1/check (status 200, whatever the
// decision).
type CheckResponse struct {
	Decision string `json:"decision"` // allow | deny | defer
	// Ticket names a deferred request (GET /v1/deferred/{ticket}), and
	// RetryAfterMS estimates its release.
	Ticket       string `json:"ticket,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	// DeferError says why a request that would have been deferred was
	// refused instead: the deferred topic or the store did not take it,
	// or a bound of the queue (defer.max_queued, deferred.max_bytes)
	// was reached.
	DeferError string   `json:"defer_error,omitempty"`
	Statuses   []Status `json:"statuses"`
}

// Status is the decision for one descriptor, in request order.
type Status struct {
	Decision     string `json:"decision"`
	Rule         string `json:"rule,omitempty"` // empty when no rule applies
	Limit        int64  `json:"limit"`
	Unit         string `json:"unit,omitempty"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	// RetryNever is set when retrying cannot help: the hits exceed what the
	// rule ever admits, or the rule blocks everything.
	RetryNever bool `json:"retry_never,omitempty"`
	Unlimited  bool `json:"unlimited,omitempty"`
	Shadowed   bool `json:"shadowed,omitempty"`
	OverSoft   bool `json:"over_soft,omitempty"`
	// Elastic: an elastic rule admitted the request above its limit,
	// borrowing from its pool.
	Elastic bool `json:"elastic,omitempty"`
	// Degraded: the counter store was needed and did not answer; the
	// rule's failure policy decided.
	Degraded bool `json:"degraded,omitempty"`
	// Lease is the lease a concurrency rule's admission holds: release it
	// when the request is done (POST /v1/release), or it expires with
	// the rule's lease_ttl.
	Lease string `json:"lease,omitempty"`
}

// ErrorResponse is the body of a 4xx or 5xx answer of these endpoints
// (and of a listener too busy to take a request). Field names the request
// field at fault ("descriptors[0].entries", "body" for the body as a
// whole); it is omitted where no one field is (a busy listener, the
// analytics endpoints, which name their parameter in Error).
type ErrorResponse struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// ReleaseRequest is the body of POST /v1/release: the leases concurrency
// rules gave (a status's lease, the RateLimit-Lease header), at most 100.
type ReleaseRequest struct {
	Leases []string `json:"leases"`
}

// ReleaseResponse answers a ReleaseRequest: for each lease, in order,
// whether it was held (false: released already, or expired).
type ReleaseResponse struct {
	Released []bool `json:"released"`
}

// Leases is the answer of GET /v1/leases: the leases in flight in the
// whole fleet per concurrency rule of the live rules.
type Leases struct {
	Rules []RuleLeases `json:"rules"`
}

// RuleLeases is one concurrency rule's leases in flight (all its keys')
// and its max_in_flight (per key).
type RuleLeases struct {
	Rule        string `json:"rule"`
	InFlight    int64  `json:"in_flight"`
	MaxInFlight int64  `json:"max_in_flight"`
}

// ChargeRequest is the body of POST /v1/charge: a cost known after the
// response (tokens, bytes, backend time), counted whatever the counters
// hold. Descriptors may be left out when RequestID names a check the
// same checker decided within the idempotency TTL: its descriptors are
// charged. The answer is a [CheckResponse] whose decision is always
// allow.
type ChargeRequest struct {
	Domain      string       `json:"domain"`
	Descriptors []Descriptor `json:"descriptors,omitempty"`
	// Hits is the cost to count (required; 0 counts nothing and reports
	// the counters).
	Hits *int64 `json:"hits"`
	// RequestID makes the charge idempotent: a retry is counted once.
	// Charges and checks keep their ids apart: a charge may carry its
	// check's id.
	RequestID string `json:"request_id,omitempty"`
}
