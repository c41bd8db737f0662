// Package client calls a velvetrope service over its two public APIs:
// Envoy's rate limit service (gRPC, the default) and the native HTTP JSON
// API (POST /v1/check). Both return the same Response, so a caller can
// switch transports without changing how it reads a decision.
package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/velvetrope/velvetrope/config"
)

// Entry is one key=value pair of a descriptor.
type Entry struct {
	Key, Value string
}

// Descriptor is one aspect of a request. Hits, when not nil, is this
// descriptor's cost instead of the request's.
type Descriptor struct {
	Entries []Entry
	Hits    *uint64
	// Release gives back a lease of this descriptor's concurrency rule
	// instead of asking for a decision (Envoy's is_negative_hits, gRPC
	// only): every descriptor of the request must have it.
	Release bool
}

// Request asks for a decision. Hits 0 means one hit over gRPC (Envoy's
// rule) and is sent as 1 over HTTP too, so both transports agree; use a
// descriptor's Hits of 0 for a probe.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	Hits        uint32
	// RequestID makes retries idempotent (a check over HTTP only: the
	// Envoy API has no such field; a charge over both).
	RequestID string
}

// Status is the answer for one descriptor, in request order.
type Status struct {
	OverLimit bool
	// Limited is false when no rule applies (or the rule is unlimited);
	// then Limit, Unit and Remaining carry no limit.
	Limited    bool
	Unlimited  bool
	Limit      uint64
	Unit       string // second, minute, hour, day, week, month, year
	Name       string // the rule's name, when it has one (gRPC only)
	Remaining  uint64
	ResetAfter time.Duration
	// Lease is the lease a concurrency rule's admission holds (HTTP only:
	// Envoy's API carries none): give it back with HTTP.Release.
	Lease string
}

// Response is a decision.
type Response struct {
	OverLimit bool
	Statuses  []Status
	// UnknownDomain is set over gRPC when the service has no rules for the
	// request's domain: Envoy's API answers that OK with no limit (HTTP
	// refuses it: ErrInvalidArgument), so OverLimit false does not mean a
	// rule allowed the request. KnownDomains then lists the domains the
	// service has rules for (at most 64; a longer list ends with "*").
	UnknownDomain bool
	KnownDomains  []string
}

// ErrInvalidArgument wraps the service's refusal of a malformed request.
var ErrInvalidArgument = errors.New("invalid request")

// ErrUnavailable wraps a charge the service could not count (its counter
// store did not answer): nothing was counted; retry with the same
// request id.
var ErrUnavailable = errors.New("service unavailable")

// ParseDescriptor reads the CLI form "k=v[,k2=v2...]", the form the
// analytics name descriptors in (config.ParseDescriptorText): a backslash
// makes the next '\\', ',' or '=' part of a key or value (`tb=a\,b\=c` is
// one entry, key "tb", value "a,b=c"), so every descriptor the analytics
// list can be asked about again. A key must not be empty; a value may be
// (a key-only entry).
func ParseDescriptor(s string) (Descriptor, error) {
	es, err := config.ParseDescriptorText(s)
	if err != nil {
		return Descriptor{}, err
	}
	d := Descriptor{Entries: make([]Entry, len(es))}
	for i, e := range es {
		d.Entries[i] = Entry{Key: e.Key, Value: e.Value}
	}
	return d, nil
}

// String renders a status for people: "allow limit=100/minute remaining=99
// reset=557ms", "allow (no limit)", "allow (unlimited)"; the reset is
// rounded (Round).
func (s Status) String() string {
	code := "allow"
	if s.OverLimit {
		code = "deny"
	}
	switch {
	case s.Unlimited:
		return code + " (unlimited)"
	case !s.Limited:
		return code + " (no limit)"
	}
	out := fmt.Sprintf("%s limit=%d/%s remaining=%d reset=%s", code, s.Limit, s.Unit, s.Remaining, Round(s.ResetAfter))
	if s.Name != "" {
		out += " name=" + s.Name
	}
	return out
}

// Round rounds d for people to read: to the microsecond below 1ms, the
// millisecond below 1s (557ms), the tenth of a second below 1m (12.3s),
// and the second from there (48m37s). A decision's reset is exact to the
// nanosecond; nobody acts on more than three digits of it.
func Round(d time.Duration) time.Duration {
	a := d
	if a < 0 {
		a = -(a + 1) // + 1: the most negative duration has no positive
	}
	unit := time.Second
	switch {
	case a < time.Millisecond:
		unit = time.Microsecond
	case a < time.Second:
		unit = time.Millisecond
	case a < time.Minute:
		unit = 100 * time.Millisecond
	}
	if r := d.Round(unit); r%unit == 0 {
		return r
	}
	return d.Truncate(unit) // Round saturates at the bounds of a Duration
}
