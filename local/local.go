// Package local is the single-process rate limit engine: every counter is
// an exact in-process limiter, behind the same [ratelimit.Request] and
// [ratelimit.Decision] as the async checker (package checker), which is
// property-tested against it.
package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Engine decides from exact in-process limiters: every counter lives in
// this process, so its decisions are exact for one process and know
// nothing of other instances. Requests are bounded by
// [config.DefaultLimits]. Safe for concurrent use.
type Engine struct {
	rules *config.Store
	keyed *limiter.Keyed
	clock limiter.Clock
	ids   *ratelimit.RequestIDs // nil: no request-level idempotency
	bufs  sync.Pool             // *[]byte scratch for counter keys
}

// New returns an Engine deciding with the live rules of store, keeping
// counters in keyed (its bounds and eviction policy apply), reading time
// from clock, and remembering request ids for idemTTL (0 disables
// request-level idempotency).
func New(store *config.Store, keyed *limiter.Keyed, clock limiter.Clock, idemTTL time.Duration) (*Engine, error) {
	if store == nil || keyed == nil || clock == nil {
		return nil, errors.New("local: New needs a rule store, a keyed limiter and a clock")
	}
	l := &Engine{rules: store, keyed: keyed, clock: clock}
	if idemTTL > 0 {
		l.ids = ratelimit.NewRequestIDs(idemTTL, 1<<16)
	}
	l.bufs.New = func() any { b := make([]byte, 0, 256); return &b }
	return l, nil
}

// Rules returns the live rule set.
func (l *Engine) Rules() *config.RuleSet { return l.rules.Load() }

// Check decides req into d, reusing d.Statuses' capacity. It returns an
// error only for a malformed request (a *[ratelimit.FieldError]) or an
// internal fault; a refusal is a Decision, not an error.
func (l *Engine) Check(_ context.Context, req *ratelimit.Request, d *ratelimit.Decision) (err error) {
	rs := l.rules.Load()
	if err := req.Validate(rs); err != nil {
		return err
	}
	dom, _ := rs.Lookup(req.Domain)
	now := l.clock.Now()
	if req.Charge && len(req.Descriptors) == 0 { // a charge naming its check's id
		creq := *req
		if err := l.ids.Recall(&creq, now); err != nil {
			return err
		}
		req = &creq
	}
	fp, done, err := l.ids.Replay(req, now, d)
	if err != nil || done {
		return err
	}
	defer func() {
		if err != nil {
			l.ids.Abandon(req, fp) // nothing remembered: a retry decides afresh
		}
	}()
	n := len(req.Descriptors)
	d.Statuses = slices.Grow(d.Statuses[:0], n)[:n]

	var matched [config.MaxDescriptors]*config.Rule
	for i := range req.Descriptors {
		if matched[i] = req.Descriptors[i].Rule; matched[i] == nil {
			matched[i] = dom.Match(req.Descriptors[i].Entries)
		}
	}
	config.DropReplaced(matched[:n])

	// Descriptors naming the same counter are decided together: their hits
	// add up, and each reports the counter after all of them.
	var cost [config.MaxDescriptors]int64
	var dupOf [config.MaxDescriptors]int
	for i := range n {
		cost[i], dupOf[i] = req.HitsOf(i), -1
		for j := range i {
			if r := matched[i]; r != nil && dupOf[j] < 0 && matched[j] == r && config.SameCounter(req.Descriptors[j].Entries, req.Descriptors[i].Entries, r) {
				dupOf[i] = j
				cost[j] += cost[i]
				break
			}
		}
	}

	bufp := l.bufs.Get().(*[]byte)
	defer l.bufs.Put(bufp)
	if req.Charge { // a cost after the response: counted whatever each counter holds
		for i := range n {
			st := &d.Statuses[i]
			*st = ratelimit.Status{Code: ratelimit.OK, Rule: matched[i]}
			if r := matched[i]; r != nil && !r.Unlimited && r.Limit > 0 && dupOf[i] < 0 && r.Algorithm != config.AlgConcurrency {
				ld, err := l.keyed.ForceAt(l.key(bufp, r, req, i), r.Limiter, now, cost[i], "")
				if err != nil {
					return fmt.Errorf("local: rule %s: %w", r.ID, err)
				}
				fill(st, r, ld)
			}
		}
		for i := range n {
			if dupOf[i] >= 0 {
				d.Statuses[i] = d.Statuses[dupOf[i]]
			}
		}
		d.Code = ratelimit.OK
		l.ids.Remember(req, fp, now, d)
		return nil
	}
	// Phase 1: Envoy-semantics rules are charged now (every call counts);
	// algorithm rules are only peeked.
	denied := false
	var peeked [config.MaxDescriptors]limiter.Decision // algorithm rules' peeks, by descriptor
	var borrow [config.MaxDescriptors]int64            // elastic rules: hits above their own limit, the pool's share
	for i := range n {
		st := &d.Statuses[i]
		*st = ratelimit.Status{Code: ratelimit.OK, Rule: matched[i]}
		r := matched[i]
		if r == nil || r.Unlimited || dupOf[i] >= 0 {
			continue
		}
		var ld limiter.Decision
		var err error
		switch {
		case r.Algorithm == config.AlgConcurrency:
			return fmt.Errorf("local: rule %s: concurrency rules need the checker (their leases live in the counter store)", r.ID)
		case r.Limit == 0: // Envoy's block: everything is over
			ld = limiter.Decision{RetryAfter: limiter.Never,
				ResetAfter: time.Duration(r.Window.Nanoseconds() - now%r.Window.Nanoseconds())}
		case r.Algorithm == config.AlgEnvoy:
			ld, err = l.keyed.AllowAt(l.key(bufp, r, req, i), r.Limiter, now, cost[i], "")
		default:
			ld, err = l.keyed.PeekAt(l.key(bufp, r, req, i), r.Limiter, now, cost[i])
			peeked[i] = ld
		}
		if err != nil && !errors.Is(err, limiter.ErrCostExceedsLimit) {
			return fmt.Errorf("local: rule %s: %w", r.ID, err)
		}
		fill(st, r, ld)
		if r.Pool != nil && ld.Allowed {
			borrow[i] = above(r, ld, cost[i])
		}
		if borrow[i] > 0 { // elastic, above its own limit
			pd, err := l.keyed.PeekAt(l.poolKey(bufp, r.Pool), r.Pool.Limiter, now, borrow[i])
			if err != nil && !errors.Is(err, limiter.ErrCostExceedsLimit) {
				return fmt.Errorf("local: pool %s: %w", r.Pool.ID, err)
			}
			if !pd.Allowed { // the pool has no room: refused as the pool refuses
				borrow[i] = 0
				st.Code, st.RetryAfter, st.RetryNever, st.Remaining = ratelimit.OverLimit, max(pd.RetryAfter, 0), pd.RetryNever(), 0
				peeked[i] = limiter.Decision{}
			}
			st.Elastic = borrow[i] > 0
		}
		if st.Code == ratelimit.OverLimit {
			denied = true
		}
	}
	// Phase 2: the request stands; charge the algorithm rules. A charge
	// refused here lost a race with a concurrent request between peek and
	// charge: the request is then refused, and what phase 2 already
	// charged stays charged (conservative: never admits more).
	if !denied {
		for i := range n {
			r := matched[i]
			st := &d.Statuses[i]
			if r == nil || r.Unlimited || r.Limit == 0 || r.Algorithm == config.AlgEnvoy || st.Shadowed || dupOf[i] >= 0 {
				continue
			}
			ld, err := l.keyed.AllowAt(l.key(bufp, r, req, i), r.Limiter, now, cost[i], "")
			if err != nil && !errors.Is(err, limiter.ErrCostExceedsLimit) {
				return fmt.Errorf("local: rule %s: %w", r.ID, err)
			}
			peeked[i] = limiter.Decision{} // charged: its status is the real one
			fill(st, r, ld)
			if borrow[i] > 0 && ld.Allowed { // by the charge's answer, not the peek's
				borrow[i] = above(r, ld, cost[i])
			}
			st.Elastic = borrow[i] > 0 && ld.Allowed
			if st.Elastic { // what it takes above its limit, the pool gives
				if pd, _ := l.keyed.AllowAt(l.poolKey(bufp, r.Pool), r.Pool.Limiter, now, borrow[i], ""); !pd.Allowed {
					st.Code, st.Elastic = ratelimit.OverLimit, false
				}
			}
			if st.Code == ratelimit.OverLimit {
				denied = true
			}
		}
	}
	d.Code = ratelimit.OK
	if denied {
		d.Code = ratelimit.OverLimit
		// Nothing was charged to the algorithm rules that would have
		// admitted: report what they really have left.
		for i := range n {
			d.Statuses[i].Elastic = false // a refused request borrowed nothing
			if r := matched[i]; r != nil && r.Algorithm != config.AlgEnvoy && peeked[i].Allowed {
				peeked[i].Remaining += cost[i]
				fill(&d.Statuses[i], r, peeked[i])
			}
		}
		if deferring(req, d.Statuses[:n]) {
			d.Code = ratelimit.Deferred
			for i := range n {
				if d.Statuses[i].Code == ratelimit.OverLimit {
					d.Statuses[i].Code = ratelimit.Deferred
				}
			}
		}
	}
	for i := range n {
		if dupOf[i] >= 0 {
			d.Statuses[i] = d.Statuses[dupOf[i]]
		}
	}
	l.ids.Remember(req, fp, now, d)
	return nil
}

// deferring reports whether every refusing status is of an `on_exceed:
// defer` rule that could still admit the request (not a release, nor a
// request whose caller cannot queue it).
func deferring(req *ratelimit.Request, sts []ratelimit.Status) bool {
	if req.Release || req.NoDefer {
		return false
	}
	for i := range sts {
		st := &sts[i]
		if st.Code == ratelimit.OverLimit && (st.Rule == nil || st.Rule.OnExceed != config.ExceedDefer || st.RetryNever) {
			return false
		}
	}
	return true
}

// poolKey is a pool's counter key in the pooled buffer (as key does).
func (l *Engine) poolKey(bufp *[]byte, pool *config.Rule) string {
	*bufp = config.AppendCounterKey((*bufp)[:0], pool, pool.Path)
	b := *bufp
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// key builds descriptor i's counter key in the pooled buffer and returns it
// as a string that aliases the buffer. limiter.Keyed copies the key when it
// keeps it, so the alias is never retained past the call.
func (l *Engine) key(bufp *[]byte, r *config.Rule, req *ratelimit.Request, i int) string {
	*bufp = config.AppendCounterKey((*bufp)[:0], r, req.Descriptors[i].Entries)
	b := *bufp
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// fill turns a limiter decision into a status under rule r, applying
// shadow mode and the soft throttle's overage.
func fill(st *ratelimit.Status, r *config.Rule, ld limiter.Decision) {
	st.Limit = r.Limit
	over := r.Ceiling() - r.Limit // soft overage, 0 for hard rules
	st.Remaining = max(ld.Remaining-over, 0)
	st.ResetAfter = max(ld.ResetAfter, 0)
	st.RetryNever = ld.RetryNever()
	if !ld.Allowed {
		st.RetryAfter = max(ld.RetryAfter, 0)
	}
	switch {
	case !ld.Allowed && r.Shadow:
		st.Code, st.Shadowed, st.RetryAfter, st.RetryNever = ratelimit.OK, true, 0, false
	case !ld.Allowed:
		st.Code = ratelimit.OverLimit
	default:
		st.Code = ratelimit.OK
		st.OverSoft = over > 0 && ld.Remaining < over && r.Pool == nil // elastic: Elastic, set by Check
	}
}

// above is what an elastic rule's admission ld takes beyond the rule's own
// limit: the pool pays for those hits only, so a request that crosses the
// limit borrows the part past it.
func above(r *config.Rule, ld limiter.Decision, cost int64) int64 {
	return min(cost, max(r.Ceiling()-ld.Remaining-r.Limit, 0))
}
