// Package rlqs serves Envoy's rate limit quota service (RLQS,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService): the proxy
// decides each request itself from a quota assignment per bucket, reports
// its usage every interval, and this server charges the reports to the
// bucket's counters (a quota report is consumption, as the checker's own
// deltas are) and answers each stream's buckets with assignments: slices
// of what remains of the fleet's budget.
//
// A bucket is a descriptor of its domain (config: `rlqs: {bucket_keys}`),
// decided by the engine as any descriptor is. An assignment is cut from
// what the engine knows of the counter: what remains in the whole fleet,
// less what the other checkers are predicted to have on its way to the
// store, this checker's share of it (rates.Cut: half an equal split among
// the live checkers, half by their rates), and of that, each of this
// checker's streams' share (half equal, half by their reported demand).
// docs/design.md ("RLQS") says what bound that gives.
package rlqs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/internal/rates"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Checker is the engine the server charges reports to and cuts
// assignments from (*checker.Checker).
type Checker interface {
	Check(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision) error
	Rules() *config.RuleSet
}

// Options tune the server.
type Options struct {
	// MinAssignmentTTL is the shortest assignment_time_to_live sent; an
	// assignment lives at least two of the stream's reporting intervals
	// (as its reports' time_elapsed show). Default 2 s.
	MinAssignmentTTL time.Duration
	// IdleAfter abandons a stream's bucket whose reports held no request
	// for this long (AbandonAction: the proxy forgets it until its next
	// request). Default 10 min.
	IdleAfter time.Duration
	// Bounds bound the bucket ids (keys, values and their number: a
	// descriptor's). Zero fields: config.DefaultLimits.
	Bounds config.LimitsConfig
	Logger *slog.Logger
	// Now is the server's clock (time.Now by default; tests move it).
	Now func() time.Time
}

// Bounds of one stream's messages.
const (
	MaxUsagesPerReport  = 1000 // bucket usages one report may carry
	MaxBucketsPerStream = 10000
	allowAllTTL         = 10 * time.Minute // a bucket no limit applies to
)

// Server implements rlqsv3.RateLimitQuotaServiceServer over a Checker.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	c    Checker
	opts Options
	log  *logx.Limited

	mu      sync.Mutex
	buckets map[string]*bucket // by domain and bucket id (bucketKey)
	nextID  atomic.Uint64

	// Stats count the service's work, for metrics.
	Stats Stats
}

// Stats are the server's counters.
type Stats struct {
	Streams                                 atomic.Int64 // open
	Reports, Assignments, Abandons, Refused atomic.Uint64
	// Unreported counts the hits charged for streams lost mid-window:
	// the rest of their last assignment, counted as spent.
	Unreported atomic.Uint64
}

// New returns a server over c.
func New(c Checker, opts Options) *Server {
	if opts.MinAssignmentTTL <= 0 {
		opts.MinAssignmentTTL = 2 * time.Second
	}
	if opts.IdleAfter <= 0 {
		opts.IdleAfter = 10 * time.Minute
	}
	opts.Bounds = opts.Bounds.WithDefaults()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Server{c: c, opts: opts, log: logx.New(opts.Logger, 10*time.Second), buckets: map[string]*bucket{}}
}

// Register serves s on g.
func (s *Server) Register(g grpc.ServiceRegistrar) { rlqsv3.RegisterRateLimitQuotaServiceServer(g, s) }

// Buckets is the number of buckets some stream subscribes to.
func (s *Server) Buckets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buckets)
}

// bucket is one bucket of one domain, and the streams of this server that
// report it.
type bucket struct {
	key     string
	domain  string
	id      *rlqsv3.BucketId
	entries []config.Entry
	subs    map[*stream]*sub
}

// sub is one stream's subscription to a bucket, and what the server knows
// of the stream's grant: granted less reported is what it holds unspent.
// A grant the proxy receives replaces its bucket whole: what the old one
// held may have been spent unreported, so a grant sent to a stream that
// did not just report moves the old one's rest into unconfirmed, counted
// held until the stream's next report tells (Envoy does not report when
// an assignment changes: reports come on its timer).
type sub struct {
	demand      float64       // requests a second it reported (allowed and denied), smoothed
	interval    time.Duration // its reporting interval, as time_elapsed says
	active      time.Time     // its last report of a request
	reports     int
	granted     int64 // tokens of the grant in force
	usedSince   int64 // allowed reported since the grant
	unconfirmed int64 // an older grant's rest, maybe spent, not reported yet
	assignment  *typev3.RateLimitStrategy
	gen         uint64 // the grant's generation; delivered: the last one sent to the proxy
	delivered   uint64
}

// left is what the stream's grant holds unspent, as reported.
func (sb *sub) left() int64 { return max(0, sb.granted-sb.usedSince) }

// held is the most the stream may still spend: its grant's rest and an
// older grant's unconfirmed rest.
func (sb *sub) held() int64 { return sb.left() + sb.unconfirmed }

// stream is one StreamRateLimitQuotas call.
type stream struct {
	id     uint64
	domain string
	out    chan outMsg
	subs   map[string]*bucket
}

// outMsg is a message for a stream, and the grants it delivers.
type outMsg struct {
	m      *rlqsv3.RateLimitQuotaResponse
	grants []grantMark
}

type grantMark struct {
	sb  *sub
	gen uint64
}

// StreamRateLimitQuotas implements the service: reports in, assignments
// out, until the proxy closes the stream.
func (s *Server) StreamRateLimitQuotas(srv rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ctx := srv.Context()
	st := &stream{id: s.nextID.Add(1), out: make(chan outMsg, 64), subs: map[string]*bucket{}}
	s.Stats.Streams.Add(1)
	sendErr := make(chan error, 1)
	done := make(chan struct{})
	go func() { // the one sender of this stream
		for {
			select {
			case o := <-st.out:
				if err := srv.Send(o.m); err != nil {
					sendErr <- err
					return
				}
				s.mu.Lock()
				for _, g := range o.grants {
					g.sb.delivered = max(g.sb.delivered, g.gen)
				}
				s.mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	defer func() {
		close(done)
		s.Stats.Streams.Add(-1)
		s.lost(context.WithoutCancel(ctx), st)
	}()
	for {
		msg, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case err := <-sendErr:
			return err
		default:
		}
		if err := s.report(ctx, st, msg); err != nil {
			s.Stats.Refused.Add(1)
			return err
		}
	}
}

// report takes one usage report of st: checked whole first (a bad one is
// refused with nothing charged), then each bucket's usage charged and its
// grants cut again; the answers go in one message per stream.
func (s *Server) report(ctx context.Context, st *stream, msg *rlqsv3.RateLimitQuotaUsageReports) error {
	s.Stats.Reports.Add(1)
	domain := st.domain
	switch d := msg.GetDomain(); {
	case domain == "" && d == "":
		return status.Error(codes.InvalidArgument, "domain: the stream's first report must name its domain")
	case domain == "":
		if _, ok := s.c.Rules().Lookup(d); !ok {
			return status.Errorf(codes.InvalidArgument, "domain: %q has no rules here (known: %s)", d, strings.Join(s.c.Rules().Domains(), ", "))
		}
		domain = d
	case d != "" && d != domain:
		return status.Errorf(codes.InvalidArgument, "domain: a stream has one domain (%q), this report names %q: open another stream", domain, d)
	}
	usages := msg.GetBucketQuotaUsages()
	if len(usages) > MaxUsagesPerReport {
		return status.Errorf(codes.InvalidArgument, "bucket_quota_usages: more than %d in one report (got %d)", MaxUsagesPerReport, len(usages))
	}
	for i, u := range usages {
		if err := s.check(u, fmt.Sprintf("bucket_quota_usages[%d]", i)); err != nil {
			return err
		}
	}
	st.domain = domain
	outs := map[*stream]*outMsg{}
	for _, u := range usages {
		s.usage(ctx, st, u, outs)
	}
	for to, o := range outs {
		s.Stats.Assignments.Add(uint64(len(o.m.BucketAction)))
		s.send(to, *o)
	}
	return nil
}

// check refuses a bucket usage the server cannot take, naming its field.
func (s *Server) check(u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, field string) error {
	b := u.GetBucketId().GetBucket()
	switch {
	case len(b) == 0:
		return status.Errorf(codes.InvalidArgument, "%s.bucket_id: must name at least one key", field)
	case len(b) > s.opts.Bounds.MaxEntries:
		return status.Errorf(codes.InvalidArgument, "%s.bucket_id: more than %d keys", field, s.opts.Bounds.MaxEntries)
	case u.GetNumRequestsAllowed() > ratelimit.MaxHits || u.GetNumRequestsDenied() > ratelimit.MaxHits:
		return status.Errorf(codes.InvalidArgument, "%s: num_requests_allowed and num_requests_denied must be at most %d", field, int64(ratelimit.MaxHits))
	}
	es := make([]config.Entry, 0, len(b))
	for k, v := range b {
		if k == "" {
			return status.Errorf(codes.InvalidArgument, "%s.bucket_id: a key must not be empty", field)
		}
		es = append(es, config.Entry{Key: k, Value: v})
	}
	if err := ratelimit.CheckEntries(&s.opts.Bounds, 0, es); err != nil {
		return status.Errorf(codes.InvalidArgument, "%s.bucket_id: %v", field, err)
	}
	if e := u.GetTimeElapsed(); e != nil {
		if err := e.CheckValid(); err != nil || e.AsDuration() < 0 || e.AsDuration() > 24*time.Hour {
			return status.Errorf(codes.InvalidArgument, "%s.time_elapsed: want a valid duration from 0 to 24h, got %v", field, e)
		}
	}
	return nil
}

// usage takes one bucket's usage of a report (checked): charged, then the
// bucket's grants cut again into outs.
func (s *Server) usage(ctx context.Context, st *stream, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, outs map[*stream]*outMsg) {
	b := u.GetBucketId().GetBucket()
	allowed, denied := int64(u.GetNumRequestsAllowed()), int64(u.GetNumRequestsDenied())
	key := bucketKey(st.domain, b)
	entries, mapErr := s.c.Rules().BucketEntries(st.domain, b)
	if mapErr == nil && (allowed > 0 || denied > 0) { // charged, whatever becomes of the subscription
		req := ratelimit.Request{Domain: st.domain, Descriptors: []ratelimit.Descriptor{{Entries: entries}},
			Hits: allowed, Denied: denied, Charge: true, Report: true}
		var d ratelimit.Decision
		if err := s.c.Check(ctx, &req, &d); err != nil {
			s.log.Warn("RLQS report not counted", "domain", st.domain, "bucket", key, "error", err)
		}
	}
	now := s.opts.Now()
	joined, ok := false, false
	if mapErr == nil {
		joined, ok = s.subscribe(st, key, u.GetBucketId(), entries, now)
	}
	if !ok {
		// no rule reads this bucket, or the stream has too many: the proxy
		// is told to let it through, as Envoy's rate limit service answers
		// a descriptor without a rule
		if mapErr != nil {
			s.log.Warn("RLQS bucket maps to no rule: allowed", "domain", st.domain, "bucket", key, "error", mapErr)
		} else {
			s.log.Warn("RLQS stream holds the most buckets: this one allowed, its reports charged", "domain", st.domain,
				"bucket", key, "buckets", MaxBucketsPerStream)
		}
		add(outs, st, allowAll(u.GetBucketId()), nil, 0)
		return
	}
	s.cut(ctx, st, key, allowed, allowed+denied, u.GetTimeElapsed().AsDuration(), now, joined, outs)
}

// add puts a bucket action for to into outs.
func add(outs map[*stream]*outMsg, to *stream, m *rlqsv3.RateLimitQuotaResponse, sb *sub, gen uint64) {
	o := outs[to]
	if o == nil {
		o = &outMsg{m: &rlqsv3.RateLimitQuotaResponse{}}
		outs[to] = o
	}
	o.m.BucketAction = append(o.m.BucketAction, m.BucketAction...)
	if sb != nil {
		o.grants = append(o.grants, grantMark{sb, gen})
	}
}

// subscribe makes st report bucket key (joined: it had not); false when
// st has too many.
func (s *Server) subscribe(st *stream, key string, id *rlqsv3.BucketId, entries []config.Entry, now time.Time) (joined, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := st.subs[key]; ok {
		return false, true
	}
	if len(st.subs) >= MaxBucketsPerStream {
		return false, false
	}
	bk := s.buckets[key]
	if bk == nil {
		bk = &bucket{key: key, domain: st.domain, id: id, entries: entries, subs: map[*stream]*sub{}}
		s.buckets[key] = bk
	}
	bk.subs[st] = &sub{active: now}
	st.subs[key] = bk
	return true, true
}

// cut asks the engine what remains of the bucket's counter and cuts the
// bucket's grants into outs: st's (it just reported), and when it joined,
// the others' (their share shrank).
func (s *Server) cut(ctx context.Context, st *stream, key string, allowed, requests int64, elapsed time.Duration, now time.Time,
	joined bool, outs map[*stream]*outMsg) {
	s.mu.Lock()
	bk := s.buckets[key]
	if bk == nil || bk.subs[st] == nil {
		s.mu.Unlock()
		return
	}
	me := bk.subs[st]
	me.reports++
	if elapsed > 0 {
		me.interval = elapsed
		rate := float64(requests) / elapsed.Seconds()
		if me.demand == 0 {
			me.demand = rate
		} else {
			me.demand = (me.demand + rate) / 2
		}
	}
	if requests > 0 {
		me.active = now
	}
	// the report tells what the stream spent: an older grant's
	// unconfirmed rest first (once the latest grant is delivered, the
	// report covers all the old one spent), then the grant in force
	tail := min(allowed, me.unconfirmed)
	me.unconfirmed -= tail
	if me.delivered >= me.gen {
		me.unconfirmed = 0
	}
	me.usedSince += allowed - tail
	if now.Sub(me.active) > s.opts.IdleAfter {
		delete(bk.subs, st)
		delete(st.subs, key)
		if len(bk.subs) == 0 {
			delete(s.buckets, key)
		}
		s.mu.Unlock()
		s.Stats.Abandons.Add(1)
		add(outs, st, &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
			BucketId: bk.id, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}}}, nil, 0)
		return
	}
	domain, entries := bk.domain, bk.entries
	s.mu.Unlock()

	var v ratelimit.QuotaView
	probe := ratelimit.Request{Domain: domain, Descriptors: []ratelimit.Descriptor{{Entries: entries}}, View: &v}
	var d ratelimit.Decision
	if err := s.c.Check(ctx, &probe, &d); err != nil {
		s.log.Warn("RLQS assignment not cut", "domain", domain, "bucket", key, "error", err)
		return
	}
	limit, window := int64(0), time.Duration(0)
	if len(d.Statuses) > 0 && d.Statuses[0].Rule != nil && !d.Statuses[0].Rule.Unlimited {
		limit, window = d.Statuses[0].Limit, d.Statuses[0].Rule.Window
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	bk = s.buckets[key]
	if bk == nil || bk.subs[st] == nil {
		return
	}
	streams := make([]*stream, 0, len(bk.subs))
	var total float64
	for o, sb := range bk.subs {
		streams = append(streams, o)
		total += sb.demand
	}
	// the streams holding the most first: what a shrinking grant leaves
	// is there for the others at once
	slices.SortFunc(streams, func(a, b *stream) int {
		return cmp.Or(cmp.Compare(bk.subs[b].held(), bk.subs[a].held()), cmp.Compare(a.id, b.id))
	})
	mine := rates.Cut(max(0, v.Remaining-v.InFlight), max(v.Fleet, 1), v.Own, v.Own+v.Others) // this checker's share of what remains
	var held int64
	for _, sb := range bk.subs {
		held += sb.held()
	}
	for _, o := range streams {
		if o != st && !joined {
			continue // its own next report re-cuts it
		}
		sb := bk.subs[o]
		ttl := max(s.opts.MinAssignmentTTL, 2*sb.interval)
		if !v.Known {
			add(outs, o, assign(bk.id, blanket(typev3.RateLimitStrategy_ALLOW_ALL), allowAllTTL), nil, 0)
			continue
		}
		frac := 1 / float64(len(streams))
		if total > 0 && sb.reports >= 2 { // a new stream's demand is not known yet: an equal part
			frac = frac/2 + sb.demand/(2*total)
		}
		fair := int64(frac * float64(mine))
		if o == st && sb.assignment != nil && min(fair, max(0, mine-(held-sb.held())-sb.unconfirmed)) == sb.left() {
			// it holds its part already: the same assignment, its time to live extended
			add(outs, o, assign(bk.id, sb.assignment, ttl), nil, 0)
			continue
		}
		// a new grant replaces the proxy's bucket when it arrives: what the
		// old one holds may be spent before, unreported
		sb.unconfirmed += sb.left()
		sb.usedSince = sb.granted
		want := min(fair, max(0, mine-(held-sb.held())-sb.unconfirmed))
		var strategy *typev3.RateLimitStrategy
		if v.Window {
			strategy = windowStrategy(want, window, sb.assignment)
		} else {
			strategy = bucketStrategy(want, frac, limit, window, sb.assignment)
		}
		before := sb.held()
		sb.granted, sb.usedSince, sb.assignment = want, 0, strategy
		sb.gen++
		held += sb.held() - before
		add(outs, o, assign(bk.id, strategy, ttl), sb, sb.gen)
	}
}

// lost ends st: what each bucket's grant may still spend (the proxy may go
// on admitting from it: Envoy's reuse_last_assignment) is charged as
// spent, so that no other stream is given that budget again: an older
// grant's unconfirmed rest, and the latest grant's if it reached the
// proxy.
func (s *Server) lost(ctx context.Context, st *stream) {
	s.mu.Lock()
	type charge struct {
		domain  string
		entries []config.Entry
		hits    int64
	}
	var charges []charge
	for key, bk := range st.subs {
		if sb := bk.subs[st]; sb != nil {
			hits := sb.unconfirmed
			if sb.delivered >= sb.gen {
				hits += sb.left()
			}
			if hits > 0 {
				charges = append(charges, charge{bk.domain, bk.entries, hits})
			}
		}
		delete(bk.subs, st)
		if len(bk.subs) == 0 {
			delete(s.buckets, key)
		}
	}
	s.mu.Unlock()
	for _, c := range charges {
		req := ratelimit.Request{Domain: c.domain, Descriptors: []ratelimit.Descriptor{{Entries: c.entries}}, Hits: c.hits, Charge: true}
		var d ratelimit.Decision
		if err := s.c.Check(ctx, &req, &d); err != nil {
			s.log.Warn("RLQS: a lost stream's grant not counted", "domain", c.domain, "error", err)
			continue
		}
		s.Stats.Unreported.Add(uint64(c.hits))
	}
}

// send queues o for st; a stream that does not read its answers loses
// them (its next report is answered again) rather than hold the others.
func (s *Server) send(st *stream, o outMsg) {
	select {
	case st.out <- o:
	default:
		s.log.Warn("RLQS stream not reading its assignments: one message dropped", "stream", st.id)
	}
}

// bucketKey names a bucket of domain: its keys and values, sorted, each
// escaped (config.AppendEscaped) so that no two buckets share a name.
func bucketKey(domain string, b map[string]string) string {
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	buf := config.AppendEscaped(nil, domain)
	for _, k := range keys {
		buf = append(buf, '|')
		buf = config.AppendEscaped(buf, k)
		buf = append(buf, '=')
		buf = config.AppendEscaped(buf, b[k])
	}
	return string(buf)
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// maxTokens bounds a token bucket's tokens (Envoy's fields are uint32).
const maxTokens = 1<<32 - 1

// windowStrategy is a window rule's assignment: a grant of share tokens,
// refilled by one token a window (Envoy's buckets must refill: the least
// there is), in whole seconds (Envoy divides by the seconds). A proxy
// starts a strategy unlike its current one full, so a grant equal to the
// last one's tokens is made unlike it by a second of fill_interval (prev:
// the assignment it replaces). No tokens: DENY_ALL until the next cut.
func windowStrategy(share int64, window time.Duration, prev *typev3.RateLimitStrategy) *typev3.RateLimitStrategy {
	if share <= 0 {
		return blanket(typev3.RateLimitStrategy_DENY_ALL)
	}
	fill := max(window.Truncate(time.Second), time.Second)
	if tb := prev.GetTokenBucket(); tb != nil && int64(tb.GetMaxTokens()) == min(share, maxTokens) && tb.GetFillInterval().AsDuration() == fill {
		fill += time.Second
	}
	return tokenBucket(share, 1, fill)
}

// bucketStrategy is a bucket rule's assignment: a grant of share tokens,
// refilled at no more than the stream's part (frac) of the rule's rate
// (limit per window), over whole seconds. No tokens: DENY_ALL until the
// next cut (the rule's own refill is the others' meanwhile).
func bucketStrategy(share int64, frac float64, limit int64, window time.Duration, prev *typev3.RateLimitStrategy) *typev3.RateLimitStrategy {
	rate := frac * float64(limit) / window.Seconds() // tokens a second
	if share <= 0 || rate <= 0 {
		return blanket(typev3.RateLimitStrategy_DENY_ALL)
	}
	secs := max(int64(math.Ceil(1/rate)), 1)
	per := max(int64(rate*float64(secs)), 1) // never faster than the share
	fill := time.Duration(min(secs, 86400)) * time.Second
	if tb := prev.GetTokenBucket(); tb != nil && int64(tb.GetMaxTokens()) == min(share, maxTokens) &&
		int64(tb.GetTokensPerFill().GetValue()) == per && tb.GetFillInterval().AsDuration() == fill {
		fill += time.Second // a new grant must start full
	}
	return tokenBucket(share, per, fill)
}

func tokenBucket(tokens, per int64, fill time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: uint32(min(tokens, maxTokens)), TokensPerFill: wrapperspb.UInt32(uint32(min(per, maxTokens))),
		FillInterval: durationpb.New(fill)}}}
}

func assign(id *rlqsv3.BucketId, strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: strategy}}}}}
}

func allowAll(id *rlqsv3.BucketId) *rlqsv3.RateLimitQuotaResponse {
	return assign(id, blanket(typev3.RateLimitStrategy_ALLOW_ALL), allowAllTTL)
}

// MetricsRegistry is where RegisterMetrics puts the server's metrics (the
// binary's Prometheus registry); each is read when scraped.
type MetricsRegistry interface {
	Counter(name, help string, value func() float64)
	Gauge(name, help string, value func() float64)
}

// RegisterMetrics exposes the server's work as velvetrope_rlqs_* metrics.
func (s *Server) RegisterMetrics(reg MetricsRegistry) {
	reg.Gauge("velvetrope_rlqs_streams", "Open rate limit quota (RLQS) streams.", func() float64 { return float64(s.Stats.Streams.Load()) })
	reg.Gauge("velvetrope_rlqs_buckets", "RLQS buckets some open stream reports.", func() float64 { return float64(s.Buckets()) })
	reg.Counter("velvetrope_rlqs_reports_total", "RLQS usage reports taken.", func() float64 { return float64(s.Stats.Reports.Load()) })
	reg.Counter("velvetrope_rlqs_assignments_total", "RLQS quota assignments sent.", func() float64 { return float64(s.Stats.Assignments.Load()) })
	reg.Counter("velvetrope_rlqs_abandoned_total", "RLQS buckets abandoned after rlqs idle time.", func() float64 { return float64(s.Stats.Abandons.Load()) })
	reg.Counter("velvetrope_rlqs_refused_total", "RLQS streams ended for a malformed report (InvalidArgument).", func() float64 { return float64(s.Stats.Refused.Load()) })
	reg.Counter("velvetrope_rlqs_unreported_hits_total", "Hits charged for RLQS streams lost mid-window: the rest of their last assignment, counted spent.",
		func() float64 { return float64(s.Stats.Unreported.Load()) })
}
