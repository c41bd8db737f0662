package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/config"
)

// MaxHits bounds the cost of one request (and of one descriptor). The
// bounds of its shape are config's ([config.LimitsConfig]).
const MaxHits = 1 << 32

// Descriptor is one aspect of a request, such as [remote_address=1.2.3.4]
// or [tenant=acme, route=/export].
type Descriptor struct {
	Entries []config.Entry
	// Hits, when HasHits is set, is this descriptor's cost instead of the
	// request's (Envoy's per-descriptor hits_addend).
	Hits    int64
	HasHits bool
	// Rule, when set, is decided instead of the rule the entries match:
	// Envoy's per-descriptor limit override (see config.OverrideRule).
	Rule *config.Rule
}

// HitsOf is the cost of descriptor i: its own hits when it has them, else
// the request's.
func (r *Request) HitsOf(i int) int64 {
	if d := &r.Descriptors[i]; d.HasHits {
		return d.Hits
	}
	return r.Hits
}

// Match fills matched (one place per descriptor) with each descriptor's
// rule in dom: its own (an override, a release naming it), else the one
// its entries match (nil: none).
func (r *Request) Match(dom config.Domain, matched []*config.Rule) []*config.Rule {
	for i := range r.Descriptors {
		if matched[i] = r.Descriptors[i].Rule; matched[i] == nil {
			matched[i] = dom.Match(r.Descriptors[i].Entries)
		}
	}
	return matched
}

// Request asks for a decision. Hits is the cost: 0 is a probe that reports
// without consuming. A non-empty RequestID makes retries idempotent: the
// same request (domain, descriptors, hits, overrides) with the same id
// inside the idempotency TTL gets the first answer again and is not
// charged twice; a different request with that id is refused with
// [ErrRequestIDConflict]. Request ids must come from a trusted front:
// anyone who can choose ids can probe whether an id was used.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	Hits        int64
	RequestID   string
	// Release marks the drain's decision on a deferred request: a refusal
	// is then OverLimit (wait and ask again), never Deferred anew.
	Release bool
	// NoDefer says the caller cannot queue a deferred request (Envoy's
	// API has no defer answer; an API without a deferred queue): a
	// refusal by an `on_exceed: defer` rule is then OverLimit, and counted
	// as denied, not deferred.
	NoDefer bool
	// Prehashed says the values of hash_values rules are hashed already
	// (the async checker's Hashed): they are not hashed again. Such a request names
	// each descriptor's rule (Descriptor.Rule): a hash matches no value.
	Prehashed bool
	// Charge makes the request a cost charged after the response (tokens
	// or bytes known only then): its hits are counted whatever the
	// counters hold, past their limits if need be, so that the next
	// requests are refused; it is never refused itself (the decision is
	// OK, and each status says what remains after it). With a RequestID it
	// is counted once: a retry gets the first answer (charges and checks
	// keep their ids apart, so a charge may reuse its check's id). A
	// charge with a RequestID and no descriptors charges the descriptors
	// of the check this engine decided under that id within its TTL.
	Charge bool
	// Report makes a Charge a quota report (Envoy's RLQS): Hits are the
	// requests the client admitted itself, counted as admitted decisions
	// (not as late charges), and Denied those it refused, counted as
	// refusals that charged nothing.
	Report bool
	Denied int64
	// View, set on a probe (Hits 0) of one descriptor, is filled with what
	// the engine knows of its counter, for cutting quota assignments.
	View *QuotaView
	// ReleaseLeases makes the request give back one lease of each of its
	// concurrency descriptors (Envoy's is_negative_hits, which names no
	// lease): the counter's oldest. Other rules take nothing; nothing is
	// refused. A lease's own id releases exactly it (LeaseReleaser).
	ReleaseLeases bool
}

// QuotaView is what an engine knows of one counter (Request.View): what
// remains of it now in the whole fleet (as this engine sees it), when it
// is fresh again, and how it is being spent: the live engines sharing it,
// this one's and the others' hits per second (0: not learned yet) and the
// others' hits predicted on their way to the store.
type QuotaView struct {
	Remaining  int64
	ResetAfter time.Duration
	// Window: the counter is forgotten at ResetAfter (window algorithms);
	// otherwise it refills at the rule's limit per window (buckets).
	Window             bool
	Fleet, Own, Others int64
	InFlight           int64
	Known              bool // the engine found the counter (a rule matched)
}

// LeaseReleaser releases the lease a concurrency rule's status gave
// (Status.Lease), whichever checker decided it. released is false when it
// was not held any more (released already, or expired); a lease id no
// checker issues is a *FieldError naming lease.
type LeaseReleaser interface {
	ReleaseLease(ctx context.Context, lease string) (released bool, err error)
}

// Code is the outcome of one descriptor or a whole request.
type Code uint8

// Codes.
const (
	OK        Code = iota + 1 // within the limit, or no limit applies
	OverLimit                 // refused
	// Deferred: over an `on_exceed: defer` rule. Not admitted now, nothing
	// charged; the caller queues the request (package deferred), whose
	// release is a decision of its own. A request is deferred when every
	// descriptor that refuses it defers.
	Deferred
)

// String is the code as the APIs write it: allow, deny or defer.
func (c Code) String() string {
	switch c {
	case OK:
		return "allow"
	case OverLimit:
		return "deny"
	case Deferred:
		return "defer"
	}
	return "unknown"
}

// Status is the decision for one descriptor.
type Status struct {
	Code Code
	// Rule is the matched rule; nil when no rule applies (no match, or the
	// rule was replaced by another descriptor's rule).
	Rule *config.Rule
	// Limit and Remaining are in hits per the rule's window; Remaining is
	// what is left after this request.
	Limit, Remaining int64
	// ResetAfter is how long until the counter is fresh again (of a fresh
	// counter, probed with hits 0: when one hit charged now would be
	// forgotten, what a request of one hit reports; never 0 for a rule
	// with a limit); RetryAfter how long until the same request could pass
	// (0 when allowed). When
	// RetryNever is set, waiting cannot help (the hits exceed what the rule
	// can ever admit, or the rule blocks everything).
	ResetAfter, RetryAfter time.Duration
	RetryNever             bool
	// Shadowed is set when a shadow_mode rule would have refused: the
	// status says OK and the refusal is only recorded.
	Shadowed bool
	// OverSoft is set when a soft throttle admitted the request above the
	// base limit (within the overage).
	OverSoft bool
	// Elastic is set when an elastic rule admitted the request above its
	// limit, borrowing from its pool.
	Elastic bool
	// Degraded is set when the decision needed the counter store, the store
	// did not answer, and the rule's failure policy decided instead.
	Degraded bool
	// Lease is the lease an admitted request holds under a concurrency
	// rule, to release when it is done (LeaseReleaser); it expires with
	// the rule's lease_ttl otherwise. Empty for every other rule, and
	// when the request was refused.
	Lease string
}

// Decision is the outcome of a request: OverLimit if any status is,
// Deferred if every refusing status defers.
type Decision struct {
	Code     Code
	Statuses []Status
}

// Allowed reports whether the request was admitted.
func (d *Decision) Allowed() bool { return d.Code == OK }

// Errors a caller can branch on (an HTTP layer maps them to 400).
var (
	ErrUnknownDomain = errors.New("unknown domain")
	ErrNoDescriptors = errors.New("no descriptors")
	ErrBadRequest    = errors.New("bad request")
	ErrNegativeHits  = errors.New("negative hits")
	// ErrRequestIDConflict: the request id was used, within its TTL, by a
	// request with other descriptors, hits or limits (HTTP 409, gRPC
	// FailedPrecondition). It arrives wrapped in a *FieldError naming
	// request_id.
	ErrRequestIDConflict = errors.New("request id already used by a different request")
	errRequestIDConflict = &FieldError{"request_id", ErrRequestIDConflict}
	// ErrRequestIDInFlight: the same request with the same id is still
	// being decided after MaxIDWait (HTTP 409): retry it.
	ErrRequestIDInFlight = errors.New("a request with this id is still being decided; retry")
	errRequestIDInFlight = &FieldError{"request_id", ErrRequestIDInFlight}
)

// FieldError names the request field that is wrong, for API answers.
type FieldError struct {
	Field string
	Err   error
}

// Error is "field: what is wrong".
func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the error the field has, for [errors.Is].
func (e *FieldError) Unwrap() error { return e.Err }

// Validate checks the shape of r against rs and [config.DefaultLimits],
// naming the field at fault.
func (r *Request) Validate(rs *config.RuleSet) error {
	_, known := rs.Lookup(r.Domain)
	b := config.DefaultLimits()
	return r.ValidateBounds(known, &b)
}

// ValidateBounds checks r's shape against b, naming the field at fault;
// known says whether r's domain has rules (an engine looks the domain up
// anyway).
func (r *Request) ValidateBounds(known bool, b *config.LimitsConfig) error {
	switch {
	case r.Domain == "":
		return &FieldError{"domain", fmt.Errorf("%w: must not be empty", ErrBadRequest)}
	case !known:
		return &FieldError{"domain", fmt.Errorf("%w %q", ErrUnknownDomain, r.Domain)}
	case len(r.Descriptors) == 0 && !(r.Charge && r.RequestID != ""):
		return &FieldError{"descriptors", ErrNoDescriptors}
	case len(r.Descriptors) > b.MaxDescriptors:
		return &FieldError{"descriptors", fmt.Errorf("%w: more than %d descriptors (got %d)", ErrBadRequest, b.MaxDescriptors, len(r.Descriptors))}
	case r.Hits < 0:
		return &FieldError{"hits", ErrNegativeHits}
	case r.Hits > MaxHits:
		return &FieldError{"hits", fmt.Errorf("%w: above %d", ErrBadRequest, int64(MaxHits))}
	case r.Denied < 0 || r.Denied > MaxHits:
		return &FieldError{"denied", fmt.Errorf("%w: must be within 0..%d, got %d", ErrBadRequest, int64(MaxHits), r.Denied)}
	case (r.Report || r.Denied != 0) && !r.Charge:
		return &FieldError{"denied", fmt.Errorf("%w: a quota report is a charge", ErrBadRequest)}
	case len(r.RequestID) > b.MaxRequestIDBytes:
		return &FieldError{"request_id", fmt.Errorf("%w: longer than %d bytes", ErrBadRequest, b.MaxRequestIDBytes)}
	}
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		if len(d.Entries) == 0 {
			return &FieldError{fmt.Sprintf("descriptors[%d].entries", i), fmt.Errorf("%w: must not be empty", ErrBadRequest)}
		}
		if d.HasHits && (d.Hits < 0 || d.Hits > MaxHits) {
			return &FieldError{fmt.Sprintf("descriptors[%d].hits", i), fmt.Errorf("%w: must be within 0..%d, got %d", ErrBadRequest, int64(MaxHits), d.Hits)}
		}
		if err := CheckEntries(b, i, d.Entries); err != nil {
			return err
		}
	}
	return nil
}

// RetryAfter returns how long the caller should wait before retrying a
// refused request: the longest wait among refusing statuses, and never
// when one of them can never pass.
func (d *Decision) RetryAfter() (wait time.Duration, never bool) {
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if st.Code == OK {
			continue
		}
		if st.RetryNever {
			return 0, true
		}
		wait = max(wait, st.RetryAfter)
	}
	return wait, false
}

// Refuse turns a Deferred decision into the refusal it is when the request
// cannot be queued (no queue, or the queue did not take it): every
// deferring status and the decision become OverLimit. Any other decision
// is left as it is.
func (d *Decision) Refuse() {
	if d.Code != Deferred {
		return
	}
	d.Code = OverLimit
	for i := range d.Statuses {
		if d.Statuses[i].Code == Deferred {
			d.Statuses[i].Code = OverLimit
		}
	}
}
