// Package rls serves velvetrope as Envoy's global rate limit service:
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC,
// and the same request and response in protojson on POST /json, with the
// answers Envoy's own ratelimit service gives for the same Envoy-format
// rules and requests.
//
// Where velvetrope's native API is stricter, this one follows Envoy: an
// unknown domain, or a descriptor no rule matches, answers OK with no
// limit, because Envoy deployments rely on that to roll out rules
// independently of the proxies that send descriptors. Over gRPC, an
// unknown domain's answer also carries the [UnknownDomainTrailer], which
// Envoy ignores and velvetrope's own client reads.
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Checker decides requests and tells the live rules (the service answers
// the domains they know); *checker.Checker and *local.Engine implement it.
type Checker interface {
	ratelimit.Checker
	Rules() *config.RuleSet
}

// Options tune the service.
type Options struct {
	// ResponseHeaders adds RateLimit-Policy, RateLimit, X-RateLimit-* and
	// (when refused) Retry-After to response_headers_to_add, for Envoy to
	// forward to the client. Off by default, as in Envoy's service.
	ResponseHeaders bool
	// Logger receives decisions that failed for another reason than the
	// request (answered Internal), at most one line per 10 s (nil: the
	// default logger).
	Logger *slog.Logger
	// Bounds limit the size of a request (zero fields:
	// config.DefaultLimits); give the checker's own.
	Bounds config.LimitsConfig
	// Decisions is told of every decision answered (nil: none).
	Decisions ratelimit.Observer
	// MaxConcurrentStreams bounds the calls one gRPC connection carries at
	// once (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS; 0:
	// DefaultMaxConcurrentStreams): a client's further streams are refused,
	// a client library waits for a free one or opens a connection.
	MaxConcurrentStreams uint32
	// CallTimeout is the furthest deadline NewGRPCServer lets a call have
	// (0: DefaultCallTimeout): a call whose client set none, or one
	// further, gets one CallTimeout away, so that a stream which never
	// sends its request is closed then instead of held for good. A nearer
	// deadline is kept (Envoy always sets one: its filter's timeout).
	CallTimeout time.Duration
}

// The defaults of Options: 256 streams, well above what one Envoy worker
// or client connection keeps in flight (a few dozen), and 10 s, the HTTP
// listener's read timeout.
const (
	DefaultMaxConcurrentStreams = 256
	DefaultCallTimeout          = 10 * time.Second
)

// Server implements rlsv3.RateLimitServiceServer over a Checker.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	c         Checker
	opts      Options
	overrides *overrides
	log       *logx.Limited
	work      sync.Pool // *work: the converted request and its decision
	unknown   unknownDomains
	// Stats count calls by outcome, for metrics.
	Stats Stats
}

// Stats are the service's call counters.
type Stats struct {
	OK, OverLimit, Invalid, Errors atomic.Uint64
}

// work is one call's reusable memory: the converted request must not
// outlive the call, the response does (gRPC marshals it after we return).
type work struct {
	req     ratelimit.Request
	d       ratelimit.Decision
	entries []config.Entry
	raw     []byte // the gRPC path: the call's request bytes (wire.go)
	// held is gRPC's buffer raw aliases, freed by putWork; own is the
	// work's buffer raw is copied into when gRPC's comes in pieces
	held mem.BufferSlice
	own  []byte
}

// New returns a Server deciding with c.
func New(c Checker, opts Options) *Server {
	opts.Bounds = opts.Bounds.WithDefaults()
	if opts.MaxConcurrentStreams == 0 {
		opts.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	s := &Server{c: c, opts: opts, overrides: newOverrides(), log: logx.New(opts.Logger, 10*time.Second)}
	s.work.New = func() any { return new(work) }
	return s
}

// maxUint32 is what Envoy answers as the remaining of an unlimited rule.
const maxUint32 = math.MaxUint32

// ShouldRateLimit decides req as Envoy's ratelimit service does. Malformed
// requests get codes.InvalidArgument naming the field at fault. (The gRPC
// server runs the same decision without these message types: wire.go.)
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	w := s.work.Get().(*work)
	defer s.putWork(w)
	rs := s.c.Rules()
	if err := w.convert(req, s.overrides, rs, &s.opts.Bounds); err != nil {
		s.Stats.Invalid.Add(1)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	known, err := s.decide(ctx, w, rs)
	if err != nil {
		return nil, err
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	statuses := make([]rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))
	for i := range statuses {
		statuses[i].Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = &statuses[i]
	}
	if !known {
		s.markUnknown(ctx, rs)
		return resp, nil
	}
	if w.d.Code != ratelimit.OK { // a defer is OVER_LIMIT: Envoy has no such answer
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	limits := make([]rlsv3.RateLimitResponse_RateLimit, len(w.d.Statuses))
	for i := range w.d.Statuses {
		fill(&statuses[i], &limits[i], &w.d.Statuses[i])
	}
	if s.opts.ResponseHeaders {
		resp.ResponseHeadersToAdd = headers(&w.d)
	}
	return resp, nil
}

// decide runs w.req through the checker and counts the outcome. known is
// false when the domain has no rules: Envoy answers OK, no limit, for a
// domain it does not know. Failures come back as gRPC status errors.
func (s *Server) decide(ctx context.Context, w *work, rs *config.RuleSet) (known bool, err error) {
	if !rs.HasDomain(w.req.Domain) {
		s.Stats.OK.Add(1)
		return false, nil
	}
	if err := s.c.Check(ctx, &w.req, &w.d); err != nil {
		if errors.Is(err, ratelimit.ErrUnknownDomain) {
			s.Stats.OK.Add(1)
			return false, nil // a reload removed the domain since the look-up above
		}
		var fe *ratelimit.FieldError
		if errors.As(err, &fe) {
			s.Stats.Invalid.Add(1)
			if errors.Is(err, ratelimit.ErrRequestIDConflict) || errors.Is(err, ratelimit.ErrRequestIDInFlight) {
				return false, status.Error(codes.FailedPrecondition, fe.Error())
			}
			return false, status.Error(codes.InvalidArgument, fe.Error())
		}
		s.Stats.Errors.Add(1)
		s.log.Warn("ShouldRateLimit failed", "domain", w.req.Domain, "error", err)
		return false, status.Error(codes.Internal, err.Error())
	}
	// an engine that defers whatever the request says is refused here:
	// nothing queues it, so no metric may count it deferred
	w.d.Refuse()
	if s.opts.Decisions != nil && !w.req.Charge && !w.req.ReleaseLeases { // a charge or a release is no decision
		s.opts.Decisions.Observe(&w.d)
	}
	if w.d.Code != ratelimit.OK {
		s.Stats.OverLimit.Add(1)
	} else {
		s.Stats.OK.Add(1)
	}
	return true, nil
}

var (
	errUnit = errors.New("unit: must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR")
)

// convert validates req's shape against b and fills w.req, reusing w's
// memory. Overrides apply only in domains rs knows, as in Envoy's service.
func (w *work) convert(req *rlsv3.RateLimitRequest, o *overrides, rs *config.RuleSet, b *config.LimitsConfig) error {
	// the bounds first, in the order the wire parser meets them
	for i, d := range req.Descriptors {
		if i == b.MaxDescriptors {
			return errTooManyDescriptors(b)
		}
		if d != nil && len(d.Entries) > b.MaxEntries {
			return errTooManyEntries(i, b)
		}
	}
	if err := checkShape(req.Domain, len(req.Descriptors), b); err != nil {
		return err
	}
	n := 0
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return fieldf(index("descriptors", i, "entries"), "must not be empty")
		}
		n += len(d.Entries)
	}
	if cap(w.entries) < n {
		w.entries = make([]config.Entry, n)
	}
	entries := w.entries[:n]
	w.start(req.Domain, req.HitsAddend)
	known := rs.HasDomain(req.Domain)
	for i, d := range req.Descriptors {
		es := entries[:len(d.Entries)]
		entries = entries[len(d.Entries):]
		for j, e := range d.Entries {
			if e == nil {
				return fieldf(index("descriptors", i, "entries")+index("", j, "key"), "must not be empty")
			}
			es[j] = config.Entry{Key: e.Key, Value: e.Value}
		}
		var hits *uint64
		if d.HitsAddend != nil {
			hits = &d.HitsAddend.Value
		}
		if err := w.add(i, es, d.Limit, hits, d.IsNegativeHits, o, rs, known, b); err != nil {
			return err
		}
	}
	return nil
}

// checkShape checks a request's domain and descriptor count.
func checkShape(domain string, descriptors int, b *config.LimitsConfig) error {
	switch {
	case domain == "":
		return errors.New("domain: must not be empty")
	case descriptors == 0:
		return errors.New("descriptors: must not be empty")
	case descriptors > b.MaxDescriptors:
		return errTooManyDescriptors(b)
	}
	return nil
}

// errTooManyDescriptors and errTooManyEntries are the bounds' errors,
// the same from both decoders; they give the bound, not the count: a
// decoder stops at the first descriptor or entry past it.
func errTooManyDescriptors(b *config.LimitsConfig) error {
	return fieldf("descriptors", "more than %d descriptors", b.MaxDescriptors)
}

func errTooManyEntries(i int, b *config.LimitsConfig) error {
	return fieldf(index("descriptors", i, "entries"), "more than %d entries", b.MaxEntries)
}

// start begins w.req for domain with the request's hits_addend.
func (w *work) start(domain string, hitsAddend uint32) {
	hits := int64(hitsAddend)
	if hits == 0 {
		hits = 1 // Envoy: an unset hits_addend means one hit
	}
	// NoDefer: Envoy's API has no defer answer, and nothing here queues
	w.req = ratelimit.Request{Domain: domain, Hits: hits, Descriptors: w.req.Descriptors[:0], NoDefer: true}
}

// add validates descriptor i (its entries es, its limit override, its own
// hits_addend when set) and appends it to w.req.
func (w *work) add(i int, es []config.Entry, lim *ratelimitv3.RateLimitDescriptor_RateLimitOverride, hits *uint64,
	negative bool, o *overrides, rs *config.RuleSet, known bool, b *config.LimitsConfig) error {
	marked := len(es) > 0 && es[len(es)-1].Key == ChargeMarker
	switch {
	case marked && len(es) == 1:
		return fieldf(index("descriptors", i, "entries"), "%s alone: nothing to charge", ChargeMarker)
	case i == 0:
		w.req.Charge = marked // Envoy's stream-done call for a velvetrope charge
	case marked != w.req.Charge:
		return fieldf(index("descriptors", i, "entries"), "%s on some descriptors only: a charge and a decision are separate calls", ChargeMarker)
	}
	if marked { // the marker is no entry of the counter
		es = es[:len(es)-1]
	}
	switch {
	case len(es) == 0:
		return fieldf(index("descriptors", i, "entries"), "must not be empty")
	case len(es) > b.MaxEntries:
		return errTooManyEntries(i, b)
	case i == 0:
		w.req.ReleaseLeases = negative // is_negative_hits: give back a concurrency lease
	case negative != w.req.ReleaseLeases:
		return fieldf(index("descriptors", i, "is_negative_hits"), "set on some descriptors only: a release of leases and a decision are separate calls")
	}
	if negative && w.req.Charge {
		return fieldf(index("descriptors", i, "is_negative_hits"), "a release of leases is no charge (%s)", ChargeMarker)
	}
	for j := range es {
		if es[j].Key == "" {
			return fieldf(index("descriptors", i, "entries")+index("", j, "key"), "must not be empty")
		}
	}
	if err := ratelimit.CheckEntries(b, i, es); err != nil {
		return err
	}
	cd := ratelimit.Descriptor{Entries: es}
	if lim != nil && known {
		r, err := o.rule(w.req.Domain, es, lim, rs.Match(w.req.Domain, es), rs.HashedKeys(w.req.Domain, es))
		if err != nil {
			return fmt.Errorf("%s%w", index("descriptors", i, "limit."), err)
		}
		cd.Rule = r
	}
	if hits != nil {
		if *hits > ratelimit.MaxHits {
			return fieldf(index("descriptors", i, "hits_addend"), "above %d (got %d)", int64(ratelimit.MaxHits), *hits)
		}
		cd.Hits, cd.HasHits = int64(*hits), true
	}
	w.req.Descriptors = append(w.req.Descriptors, cd)
	return nil
}

// fill writes one descriptor's status the way Envoy shapes it.
func fill(out *rlsv3.RateLimitResponse_DescriptorStatus, lim *rlsv3.RateLimitResponse_RateLimit, st *ratelimit.Status) {
	v := view(st)
	out.Code = v.code
	out.LimitRemaining = v.remaining
	if !v.limited {
		return
	}
	lim.Name, lim.RequestsPerUnit, lim.Unit = v.name, v.perUnit, v.unit
	out.CurrentLimit = lim
	out.DurationUntilReset = durationpb.New(v.reset)
}

// statusView is one descriptor's status in Envoy's terms, for both
// encoders (fill, appendStatus).
type statusView struct {
	code      rlsv3.RateLimitResponse_Code
	remaining uint32
	limited   bool // a rule with a limit: current_limit and duration_until_reset are set
	name      string
	perUnit   uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	reset     time.Duration
}

func view(st *ratelimit.Status) statusView {
	v := statusView{code: rlsv3.RateLimitResponse_OK}
	if st.Code != ratelimit.OK {
		v.code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	r := st.Rule
	switch {
	case r == nil: // no rule: OK, no limit, remaining 0
		return v
	case r.Unlimited:
		v.remaining = maxUint32
		return v
	}
	v.limited, v.name, v.perUnit, v.unit = true, r.Name, clampUint32(r.Limit), unitOf(r.Unit)
	v.remaining = clampUint32(st.Remaining)
	v.reset = st.ResetAfter
	if r.Algorithm == config.AlgEnvoy {
		// Envoy counts whole seconds: the reset is unit - now%unit, never 0.
		v.reset = time.Duration(max(ratelimit.CeilSeconds(v.reset), 1)) * time.Second
	}
	return v
}

func unitOf(u config.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch u {
	case config.Second:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case config.Minute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case config.Hour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case config.Day:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case config.Week:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case config.Month:
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case config.Year:
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

func clampUint32(v int64) uint32 { return uint32(min(max(v, 0), maxUint32)) }

// headers renders the same rate limit headers the HTTP API sets.
func headers(d *ratelimit.Decision) []*corev3.HeaderValue {
	h := http.Header{}
	ratelimit.SetHeaders(h, d)
	keys := slices.Sorted(maps.Keys(h)) // a stable order for Envoy and for tests
	out := make([]*corev3.HeaderValue, 0, len(keys))
	for _, k := range keys {
		for _, v := range h[k] {
			out = append(out, &corev3.HeaderValue{Key: k, Value: v})
		}
	}
	return out
}

func fieldf(field, format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{field}, args...)...)
}

// index names element i of a repeated field, then a sub-field.
func index(field string, i int, sub string) string {
	return field + "[" + strconv.Itoa(i) + "]." + sub
}
