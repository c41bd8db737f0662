// Package middleware limits net/http handlers with velvetrope: it builds
// descriptors from the request (client address behind trusted proxies, a
// header, a hashed API key, the authenticated user, method and route),
// asks a [ratelimit.Checker] — in-process (*checker.Checker,
// *local.Engine), or a remote velvetrope over gRPC ([Remote]) — in one
// call for every limit, and answers 429 with Retry-After and the RateLimit
// headers when any limit refuses.
package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/deferred"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Options configure a Limiter.
type Options struct {
	// Domain is the rule domain of every call.
	Domain string
	// Descriptors lists the limits to check, each a hierarchy of sources
	// (e.g. {ClientIP(...)} and {User(...), Route(nil)}). A descriptor one
	// of whose sources is absent from the request is left out.
	Descriptors [][]Source
	// Cost is the hits of a request (nil: 1), e.g. per route.
	Cost func(r *http.Request) int64
	// ChargeAfter, when set, is the cost a response adds once the handler
	// returned (tokens from a response header, bytes written, 1 for a 401
	// only), charged to the request's descriptors whatever their counters
	// hold (ratelimit.Request.Charge): it may take a key past its limit,
	// so that its next requests are refused. 0 charges nothing. status is
	// the response's code, h its headers. With ChargeAfter, a request
	// whose Cost is 0 is a probe that is refused once a descriptor has
	// nothing left (a budget counted only by charges, such as failed
	// logins, admits no request past it). The charge runs before the
	// handler's response is complete: in-process in microseconds, over
	// Remote in one call bounded by Timeout; a charge that fails is
	// counted in ChargeFailures and logged, and the response stands.
	ChargeAfter func(status int, h http.Header) int64
	// Timeout bounds each decision (0: the request's own context only).
	Timeout time.Duration
	// FailOpen lets requests through when the Checker fails (a remote
	// velvetrope does not answer in time), within Emergency; false
	// answers 503.
	FailOpen bool
	// Emergency is the budget of each descriptor while the Checker fails
	// and FailOpen is set: decided in this process alone (zero: 10 hits
	// per second per descriptor, bursts of 20; Limit < 0: no budget, every
	// request passes). It keeps a dead limiter from opening the gates.
	Emergency Emergency
	// Bounds limit what the sources may put in a request (zero fields:
	// config.DefaultLimits); a request beyond them is answered 400 naming
	// the attribute.
	Bounds config.LimitsConfig
	// Logger receives decision failures, at most one line per second.
	Logger *slog.Logger

	// Queue, when set, queues the requests an `on_exceed: defer` rule
	// defers: the request — method, path and query, headers less the
	// hop-by-hop ones and SensitiveHeaders, a body of at most MaxDeferBody
	// bytes — becomes the item's payload, and the answer is 202 Accepted
	// with Location: DeferredPath + ticket. Without it a deferred request
	// is 429, as it always is over a Remote velvetrope (Envoy's API has no
	// defer: it answers OVER_LIMIT).
	Queue deferred.Enqueuer
	// SensitiveHeaders are left out of a deferred request besides the
	// hop-by-hop ones (nil: DefaultSensitiveHeaders; empty: none).
	SensitiveHeaders []string
	// MaxDeferBody bounds a deferred request's body (0: 64 KiB); a larger
	// one is answered 413. The rule's max_payload_bytes bounds it too.
	MaxDeferBody int64
	// DeferredPath prefixes the ticket in Location (default
	// "/v1/deferred/", where a velvetrope checker serves its state).
	DeferredPath string
}

// DefaultSensitiveHeaders are the credentials a deferred request does not
// carry into the deferred topic unless Options.SensitiveHeaders says so.
var DefaultSensitiveHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization", "X-Api-Key"}

// Limiter is the middleware.
type Limiter struct {
	c         ratelimit.Checker
	opts      Options
	pool      sync.Pool // *call
	emergency *emergency
	// log is rate-limited: failures can repeat per request, the log must not.
	log *logx.Limited
	// Failures counts decisions the Checker could not make; Emergency
	// those the emergency budget then refused; BadRequests requests
	// refused for attributes beyond the bounds; ChargeFailures the costs
	// after the response (Options.ChargeAfter) that could not be counted.
	Failures, EmergencyDenied, BadRequests, ChargeFailures atomic.Int64
	// ReleaseFailures counts concurrency leases the Limiter could not give
	// back when the handler returned (they expire with their TTL).
	ReleaseFailures atomic.Int64
}

type call struct {
	req     ratelimit.Request
	d       ratelimit.Decision
	entries []config.Entry
	// leases are the concurrency leases the admission holds, released
	// when the handler returns; byDescriptors: a concurrency rule admitted
	// it without telling a lease (a Remote), so its descriptors release
	leases        [config.MaxDescriptors]string
	nLeases       int
	byDescriptors bool
}

// New returns a Limiter deciding with c.
func New(c ratelimit.Checker, opts Options) (*Limiter, error) {
	if opts.Domain == "" {
		return nil, errors.New("middleware: Options.Domain must not be empty")
	}
	opts.Bounds = opts.Bounds.WithDefaults()
	if err := opts.Bounds.Validate(); err != nil {
		return nil, fmt.Errorf("middleware: Options.Bounds: %w", err)
	}
	if len(opts.Descriptors) == 0 || len(opts.Descriptors) > opts.Bounds.MaxDescriptors {
		return nil, fmt.Errorf("middleware: Options.Descriptors needs 1 to %d descriptors", opts.Bounds.MaxDescriptors)
	}
	for i, d := range opts.Descriptors {
		if len(d) == 0 || len(d) > opts.Bounds.MaxEntries {
			return nil, fmt.Errorf("middleware: Options.Descriptors[%d] needs 1 to %d sources", i, opts.Bounds.MaxEntries)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SensitiveHeaders == nil {
		opts.SensitiveHeaders = DefaultSensitiveHeaders
	}
	if opts.MaxDeferBody <= 0 {
		opts.MaxDeferBody = 64 << 10
	}
	if opts.DeferredPath == "" {
		opts.DeferredPath = "/v1/deferred/"
	}
	l := &Limiter{c: c, opts: opts, log: logx.New(opts.Logger, time.Second)}
	if opts.FailOpen {
		em, err := newEmergency(opts.Emergency)
		if err != nil {
			return nil, err
		}
		l.emergency = em
	}
	l.pool.New = func() any { return new(call) }
	return l, nil
}

// Handler limits next.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cl := l.pool.Get().(*call)
		defer l.pool.Put(cl)
		if !l.build(cl, r) {
			next.ServeHTTP(w, r) // no limit applies to this request
			return
		}
		if msg := l.checkBounds(&cl.req); msg != "" {
			l.BadRequests.Add(1)
			http.Error(w, msg, http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		if l.opts.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, l.opts.Timeout)
			defer cancel()
		}
		if err := l.c.Check(ctx, &cl.req, &cl.d); err != nil {
			l.Failures.Add(1)
			l.logFailure(err)
			if l.opts.FailOpen {
				if l.emergency.allow(&cl.req) {
					next.ServeHTTP(w, r)
					return
				}
				l.EmergencyDenied.Add(1)
				w.Header().Set("Retry-After", "1")
				http.Error(w, "too many requests", http.StatusTooManyRequests)
				return
			}
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		if cl.d.Code == ratelimit.Deferred && l.deferRequest(w, r, cl) {
			return
		}
		if l.opts.ChargeAfter != nil && cl.req.Hits == 0 {
			refuseSpent(&cl.d) // a probe of a budget counted by charges: none left, no request
		}
		ratelimit.SetHeaders(w.Header(), &cl.d)
		if !cl.d.Allowed() {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte("too many requests\n"))
			return
		}
		if l.holdsLeases(cl) {
			defer l.release(ctx, cl) // also when the handler panics
		}
		if l.opts.ChargeAfter == nil {
			next.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		l.chargeAfter(ctx, cl, rec.status, w.Header())
	})
}

// holdsLeases notes the concurrency leases an admitted request holds.
func (l *Limiter) holdsLeases(cl *call) bool {
	cl.nLeases, cl.byDescriptors = 0, false
	for i := range cl.d.Statuses {
		st := &cl.d.Statuses[i]
		switch {
		case st.Lease != "":
			cl.leases[cl.nLeases] = st.Lease
			cl.nLeases++
		case st.Rule != nil && st.Rule.Algorithm == config.AlgConcurrency && st.Code == ratelimit.OK && !st.Degraded && !st.Shadowed:
			cl.byDescriptors = true
		}
	}
	return cl.nLeases > 0 || cl.byDescriptors
}

// release gives back the leases the request held, once its handler
// returned: by id where the checker told them, else by its descriptors.
// A failure is counted and logged; the lease then expires with its TTL.
func (l *Limiter) release(ctx context.Context, cl *call) {
	ctx = context.WithoutCancel(ctx) // the client may have gone: the request is done all the same
	if l.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.opts.Timeout)
		defer cancel()
	}
	var err error
	if rel, ok := l.c.(ratelimit.LeaseReleaser); ok && cl.nLeases > 0 {
		for _, lease := range cl.leases[:cl.nLeases] {
			if _, e := rel.ReleaseLease(ctx, lease); e != nil {
				err = e
			}
		}
	}
	if cl.byDescriptors || cl.nLeases > 0 && !isReleaser(l.c) {
		cl.req.ReleaseLeases, cl.req.Charge, cl.req.RequestID, cl.req.Hits = true, false, "", 1
		err = errors.Join(err, l.c.Check(ctx, &cl.req, &cl.d))
		cl.req.ReleaseLeases = false
	}
	if err != nil {
		l.ReleaseFailures.Add(1)
		l.log.Warn("releasing a concurrency lease failed: it expires with its TTL", "domain", l.opts.Domain, "error", err,
			"release_failures_total", l.ReleaseFailures.Load())
	}
}

func isReleaser(c ratelimit.Checker) bool {
	_, ok := c.(ratelimit.LeaseReleaser)
	return ok
}

// chargeAfter counts the response's cost (Options.ChargeAfter) against
// the request's descriptors.
func (l *Limiter) chargeAfter(ctx context.Context, cl *call, status int, h http.Header) {
	cost := l.opts.ChargeAfter(status, h)
	switch {
	case cost < 0: // a bug in the caller's function: no cost is negative
		l.ChargeFailures.Add(1)
		l.log.Warn("ChargeAfter returned a negative cost: nothing charged", "domain", l.opts.Domain, "cost", cost,
			"charge_failures_total", l.ChargeFailures.Load())
		return
	case cost == 0:
		return
	}
	cl.req.Charge, cl.req.Hits, cl.req.RequestID = true, cost, ""
	for i := range cl.req.Descriptors {
		cl.req.Descriptors[i].HasHits = false
	}
	defer func() { cl.req.Charge = false }()
	if cost > ratelimit.MaxHits {
		cl.req.Hits = ratelimit.MaxHits // the most one request may cost: the key is in debt either way
	}
	// the handler's context may be done (the client left): the cost was spent all the same
	ctx = context.WithoutCancel(ctx)
	if l.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.opts.Timeout)
		defer cancel()
	}
	if err := l.c.Check(ctx, &cl.req, &cl.d); err != nil {
		l.ChargeFailures.Add(1)
		l.log.Warn("charge after the response failed", "domain", l.opts.Domain, "cost", cost, "error", err,
			"charge_failures_total", l.ChargeFailures.Load())
	}
}

// refuseSpent refuses a probe (a request of no hits) when a descriptor's
// limit has nothing left: until the window resets.
func refuseSpent(d *ratelimit.Decision) {
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if st.Code == ratelimit.OK && st.Rule != nil && !st.Rule.Unlimited && st.Remaining == 0 && !st.Shadowed {
			st.Code, st.RetryAfter = ratelimit.OverLimit, max(st.ResetAfter, time.Second)
			d.Code = ratelimit.OverLimit
		}
	}
}

// statusRecorder remembers the status a handler wrote. It passes
// Flush, Hijack and the rest through Unwrap (http.ResponseController).
type statusRecorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader && code >= 200 {
		s.status, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher for handlers that stream (server-sent
// events, a model's tokens): they test for it directly.
func (s *statusRecorder) Flush() {
	s.wroteHeader = true
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// build fills cl.req from r, reusing cl's memory; false when no
// descriptor applies.
func (l *Limiter) build(cl *call, r *http.Request) bool {
	cl.req.Domain = l.opts.Domain
	cl.req.Hits = 1
	cl.req.NoDefer = l.opts.Queue == nil // without a queue an over-limit request is refused, and counted so
	if l.opts.Cost != nil {
		cl.req.Hits = l.opts.Cost(r)
	}
	cl.req.Descriptors = cl.req.Descriptors[:0]
	cl.entries = cl.entries[:0]
	var lens [config.MaxDescriptors]int
	n := 0
	for _, srcs := range l.opts.Descriptors {
		start := len(cl.entries)
		for _, src := range srcs {
			k, v, ok := src(r)
			if !ok {
				cl.entries = cl.entries[:start]
				break
			}
			cl.entries = append(cl.entries, config.Entry{Key: k, Value: v})
		}
		if len(cl.entries) > start {
			lens[n] = len(cl.entries) - start
			n++
		}
	}
	// Sliced only now: appending may have moved the entries.
	off := 0
	for _, ln := range lens[:n] {
		cl.req.Descriptors = append(cl.req.Descriptors, ratelimit.Descriptor{Entries: cl.entries[off : off+ln : off+ln]})
		off += ln
	}
	return n > 0
}

// checkBounds returns why req is beyond the bounds, naming the request
// attribute (the source's key), or "".
func (l *Limiter) checkBounds(req *ratelimit.Request) string {
	for i := range req.Descriptors {
		err := ratelimit.CheckEntries(&l.opts.Bounds, i, req.Descriptors[i].Entries)
		if err == nil {
			continue
		}
		var fe *ratelimit.FieldError
		var j int
		if errors.As(err, &fe) && strings.Contains(fe.Field, ".entries[") {
			if _, serr := fmt.Sscanf(fe.Field[strings.Index(fe.Field, ".entries[")+len(".entries["):], "%d]", &j); serr == nil &&
				j < len(req.Descriptors[i].Entries) {
				return fmt.Sprintf("bad request: request attribute %q: %v", req.Descriptors[i].Entries[j].Key, fe.Err)
			}
		}
		return "bad request: " + err.Error()
	}
	return ""
}

func (l *Limiter) logFailure(err error) {
	l.log.Warn("rate limit decision failed", "domain", l.opts.Domain, "error", err,
		"fail_open", l.opts.FailOpen, "failures_total", l.Failures.Load())
}
