package operate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// ControlSpec is what an operator asks for (POST /v1/controls).
type ControlSpec struct {
	Domain  string
	Entries []config.Entry
	Action  string
	Limit   int64
	TTL     time.Duration // 0: until deleted
	Reason  string
}

// ErrNoControls is returned when the checker's store keeps no controls.
var ErrNoControls = errors.New("the counter store keeps no operator controls")

// MaxControls bounds the controls one checker applies (allow and deny
// lists included); past it new controls are refused.
const MaxControls = 100_000

// MaxControlTTL bounds a control's ttl: a temporary control lasts at most
// a year (a permanent one has ttl 0, until deleted). The bound keeps the
// expiry, now + ttl in Unix nanoseconds, far inside an int64: 2500000h
// added to a 2026 clock wrapped to a negative expiry, a control that never
// applied and was never listed.
const MaxControlTTL = 365 * 24 * time.Hour

// SetControl validates spec, stores it for every checker and applies it
// here at once. Input errors are *ratelimit.FieldError values naming the
// field.
func (o *Operator) SetControl(ctx context.Context, spec ControlSpec) (counters.Control, error) {
	if o.ctl == nil {
		return counters.Control{}, ErrNoControls
	}
	dom, known := o.c.Rules().Lookup(spec.Domain)
	switch {
	case spec.Domain == "":
		return counters.Control{}, &ratelimit.FieldError{Field: "domain", Err: errors.New("must not be empty")}
	case !known:
		return counters.Control{}, &ratelimit.FieldError{Field: "domain", Err: fmt.Errorf("%w %q", ratelimit.ErrUnknownDomain, spec.Domain)}
	case len(spec.Entries) == 0 || len(spec.Entries) > config.MaxEntries:
		return counters.Control{}, &ratelimit.FieldError{Field: "descriptor", Err: fmt.Errorf("want 1 to %d entries, got %d", config.MaxEntries, len(spec.Entries))}
	case spec.TTL < 0 || spec.TTL > MaxControlTTL:
		return counters.Control{}, &ratelimit.FieldError{Field: "ttl", Err: fmt.Errorf("want 0 (until deleted) to %v, got %v", MaxControlTTL, spec.TTL)}
	case len(spec.Reason) > 512:
		return counters.Control{}, &ratelimit.FieldError{Field: "reason", Err: errors.New("longer than 512 bytes")}
	}
	for i, e := range spec.Entries {
		if e.Key == "" {
			return counters.Control{}, &ratelimit.FieldError{Field: fmt.Sprintf("descriptor[%d].key", i), Err: errors.New("must not be empty")}
		}
	}
	r := dom.Match(spec.Entries)
	switch spec.Action {
	case counters.ActionAllow, counters.ActionDeny:
		if spec.Limit != 0 {
			return counters.Control{}, &ratelimit.FieldError{Field: "limit", Err: fmt.Errorf("only action %q takes a limit", counters.ActionLimit)}
		}
	case counters.ActionLimit:
		if r == nil {
			return counters.Control{}, &ratelimit.FieldError{Field: "descriptor", Err: fmt.Errorf("%w in domain %q: a limit override needs a rule's algorithm and unit", ErrNoRule, spec.Domain)}
		}
		// checked before WithLimit multiplies it (ceiling, burst)
		if err := r.CheckLimit(spec.Limit); err != nil {
			return counters.Control{}, &ratelimit.FieldError{Field: "limit", Err: err}
		}
		if _, err := r.WithLimit(spec.Limit); err != nil {
			return counters.Control{}, &ratelimit.FieldError{Field: "limit", Err: err}
		}
		if spec.TTL == 0 {
			return counters.Control{}, &ratelimit.FieldError{Field: "ttl", Err: errors.New("a limit override is temporary: give it a ttl")}
		}
	default:
		return counters.Control{}, &ratelimit.FieldError{Field: "action", Err: fmt.Errorf("want %q, %q or %q, got %q", counters.ActionAllow, counters.ActionDeny, counters.ActionLimit, spec.Action)}
	}
	es := slices.Clone(o.hashed(spec.Domain, r, spec.Entries)) // stored hashed, never raw
	now := o.c.Now()
	ct := counters.Control{ID: counters.ControlID(spec.Domain, es), Domain: spec.Domain, Entries: es, Action: spec.Action,
		Limit: spec.Limit, Reason: spec.Reason, CreatedAt: now}
	if r != nil {
		ct.Rule = r.ID
	}
	if spec.TTL > 0 {
		if now > math.MaxInt64-int64(spec.TTL) { // only a clock past the year 2261
			return counters.Control{}, &ratelimit.FieldError{Field: "ttl", Err: fmt.Errorf("%v from now is past the clock's range", spec.TTL)}
		}
		ct.ExpiresAt = now + int64(spec.TTL)
	}
	if list, applied := o.c.InForce(); applied >= MaxControls && find(list, ct.ID) == nil {
		return counters.Control{}, fmt.Errorf("checker: %d controls in force: delete some first", MaxControls)
	}
	if err := o.ctl.PutControl(ctx, ct); err != nil {
		return counters.Control{}, fmt.Errorf("checker: storing control: %w", err)
	}
	return ct, o.c.SyncControls(ctx)
}

// DeleteControl removes the control id everywhere and here at once.
func (o *Operator) DeleteControl(ctx context.Context, id string) (bool, error) {
	if o.ctl == nil {
		return false, ErrNoControls
	}
	ok, err := o.ctl.DeleteControl(ctx, id)
	if err != nil {
		return false, fmt.Errorf("checker: deleting control: %w", err)
	}
	return ok, o.c.SyncControls(ctx)
}

// Controls returns the controls in force, as this checker applies them
// (pool capacities apart: Pools lists them).
func (o *Operator) Controls() []counters.Control {
	list, _ := o.c.InForce()
	now := o.c.Now()
	out := make([]counters.Control, 0, len(list))
	for i := range list {
		if list[i].Live(now) && list[i].Action != counters.ActionPool {
			out = append(out, list[i])
		}
	}
	return out
}

// ControlFor returns the control in force for one descriptor (entries as
// the operator writes them), if any.
func (o *Operator) ControlFor(domain string, entries []config.Entry) (counters.Control, bool) {
	list, _ := o.c.InForce()
	if list == nil {
		return counters.Control{}, false
	}
	es := o.hashed(domain, o.c.Rules().Match(domain, entries), entries)
	if ct := find(list, counters.ControlID(domain, es)); ct != nil && ct.Live(o.c.Now()) {
		return *ct, true
	}
	return counters.Control{}, false
}

func find(list []counters.Control, id string) *counters.Control {
	for i := range list {
		if list[i].ID == id {
			return &list[i]
		}
	}
	return nil
}
