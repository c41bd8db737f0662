// Package analytics serves the usage analytics over HTTP: top denied
// keys, one key's usage per minute, totals and deny rate per rule, the
// borrowings of elastic pools, and the timeline the dashboard draws. Every parameter is checked and named when
// wrong; the queries bind them (sink.Analytics), never splice them. The
// answers are package httpjson's, the types the Go client reads.
package analytics

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/sink"
)

// Windows are bounded: long enough for a month of minutes, short enough
// that a typo cannot scan a year. Access.MaxWindow may lower the bound.
const (
	MinWindow     = time.Minute
	MaxWindow     = 31 * 24 * time.Hour
	DefaultWindow = time.Hour
	DefaultLimit  = 10
)

// Access protects the endpoints: they reveal who is being limited (user
// ids, addresses) and each query scans ClickHouse.
type Access struct {
	// Token, when set, is required as "Authorization: Bearer <token>"
	// (401 otherwise). Never logged.
	Token string
	// MaxWindow is the longest window a query may cover (7 days; at most
	// 31).
	MaxWindow time.Duration
	// MaxConcurrent queries run at once (8); past that a request is
	// answered 503 at once rather than queued behind them.
	MaxConcurrent int
}

// Handler serves the analytics endpoints over a store. A nil store means
// analytics are off: the endpoints answer 503 saying how to turn them on.
type Handler struct {
	store  sink.Analytics
	off    string // why the store is nil
	now    func() time.Time
	logger *logx.Limited // store failures repeat per request: rate-limited
	access Access
	slots  chan struct{}  // one per query running
	audit  sink.RuleAudit // the rules store's changes; nil: not kept here
}

// WithRuleChanges serves GET /v1/analytics/rule-changes from a (nil: the
// endpoint answers 503 like the others when analytics are off).
func (h *Handler) WithRuleChanges(a sink.RuleAudit) *Handler {
	h.audit = a
	return h
}

// New returns the handler over store; off explains a nil store. Its
// access is the default one (no token) until WithAccess.
func New(store sink.Analytics, off string, logger *slog.Logger) *Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{store: store, off: off, now: time.Now, logger: logx.New(logger, 10*time.Second)}
	return h.WithAccess(Access{})
}

// WithAccess sets who may query and how much (zero fields: defaults).
func (h *Handler) WithAccess(a Access) *Handler {
	if a.MaxWindow <= 0 || a.MaxWindow > MaxWindow {
		if a.MaxWindow == 0 {
			a.MaxWindow = 7 * 24 * time.Hour
		} else {
			a.MaxWindow = MaxWindow
		}
	}
	if a.MaxConcurrent <= 0 {
		a.MaxConcurrent = 8
	}
	h.access, h.slots = a, make(chan struct{}, a.MaxConcurrent)
	return h
}

// Register adds the endpoints to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/analytics/top-denied", h.guard(h.topDenied))
	mux.HandleFunc("GET /v1/analytics/usage", h.guard(h.usage))
	mux.HandleFunc("GET /v1/analytics/rules", h.guard(h.rules))
	mux.HandleFunc("GET /v1/analytics/timeline", h.guard(h.timeline))
	mux.HandleFunc("GET /v1/analytics/pools", h.guard(h.pools))
	mux.HandleFunc("GET /v1/analytics/rule-changes", h.guard(h.ruleChanges))
}

// guard requires the token when one is set.
func (h *Handler) guard(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.access.Token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.access.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="velvetrope analytics"`)
				writeJSON(w, http.StatusUnauthorized, httpjson.ErrorResponse{Error: "analytics need a valid bearer token (analytics.token)"})
				return
			}
		}
		next(w, r)
	}
}

// errBusy marks a query refused because MaxConcurrent are running.
var errBusy = errors.New("analytics busy")

// params reads and checks the query parameters every endpoint shares.
type params struct {
	window            time.Duration
	windowText        string
	domain, rule, key string
	limit             int
}

// fmtWindow writes d as ParseWindow reads it.
func fmtWindow(d time.Duration) string {
	switch {
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// params reads and checks the query parameters, naming the one at fault.
func (h *Handler) params(r *http.Request, allowed ...string) (params, error) {
	q := r.URL.Query()
	for name := range q {
		if !slices.Contains(allowed, name) {
			return params{}, fmt.Errorf("%s: unknown parameter (want %s)", name, strings.Join(allowed, ", "))
		}
		if len(q[name]) > 1 {
			return params{}, fmt.Errorf("%s: given more than once", name)
		}
		if v := q.Get(name); !utf8.ValidString(v) || len(v) > 1024 {
			return params{}, fmt.Errorf("%s: must be valid UTF-8 of at most 1024 bytes", name)
		}
	}
	p := params{window: DefaultWindow, windowText: "1h", limit: DefaultLimit,
		domain: q.Get("domain"), rule: q.Get("rule"), key: q.Get("key")}
	if s := q.Get("window"); s != "" {
		d, err := ParseWindow(s, h.access.MaxWindow)
		if err != nil {
			return params{}, fmt.Errorf("window: %w", err)
		}
		p.window, p.windowText = d, s
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > sink.MaxTopLimit {
			return params{}, fmt.Errorf("limit: want a whole number from 1 to %d, got %q", sink.MaxTopLimit, s)
		}
		p.limit = n
	}
	return p, nil
}

// ParseWindow reads a window such as 15m, 1h, 6h or 7d (Go durations,
// and whole days with d), from MinWindow to max (MaxWindow at most; the
// handler passes analytics.max_window). Nothing overflows: a number of
// days is compared with max before it is multiplied, and a well-formed
// duration too long for time.Duration is above max like any other, never
// wrapped around into range.
func ParseWindow(s string, max time.Duration) (time.Duration, error) {
	max = min(max, MaxWindow)
	var d time.Duration
	above := false
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			above = !strings.HasPrefix(days, "-")
			d = -1
		case err != nil:
			return 0, fmt.Errorf("want a duration such as 15m, 6h or 7d, got %q", s)
		case n > int64(max/day):
			above = true
		default:
			d = time.Duration(n) * day // n <= max/day: no overflow
		}
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			if !durationSyntax.MatchString(s) {
				return 0, fmt.Errorf("want a duration such as 15m, 6h or 7d, got %q", s)
			}
			// well formed, yet too long for a time.Duration
			above, d = !strings.HasPrefix(s, "-"), -1
		}
		above = above || d > max
	}
	switch {
	case above:
		return 0, fmt.Errorf("at most %s here (analytics.max_window), got %s", fmtWindow(max), s)
	case d < MinWindow:
		return 0, fmt.Errorf("want %s to %s, got %s", fmtWindow(MinWindow), fmtWindow(max), s)
	}
	return d, nil
}

const day = 24 * time.Hour

// durationSyntax is what time.ParseDuration reads, whatever the size of
// its numbers: a string it refuses that matches this overflowed.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// since is the first minute a window covers.
func (h *Handler) since(d time.Duration) time.Time { return h.now().Add(-d).Truncate(time.Minute) }

func (h *Handler) topDenied(w http.ResponseWriter, r *http.Request) {
	p, err := h.params(r, "window", "limit", "domain", "rule")
	if h.refused(w, err) {
		return
	}
	keys, err := h.query(r.Context(), func(ctx context.Context, s sink.Analytics) (any, error) {
		return s.TopDenied(ctx, sink.TopQuery{Since: h.since(p.window), Domain: p.domain, Rule: p.rule, Limit: p.limit})
	})
	if h.failed(w, "top-denied", err) {
		return
	}
	writeJSON(w, http.StatusOK, httpjson.TopDenied{Window: p.windowText, Keys: keys.([]sink.KeyUsage)})
}

func (h *Handler) usage(w http.ResponseWriter, r *http.Request) {
	p, err := h.params(r, "window", "domain", "key", "rule")
	switch {
	case err != nil:
	case p.domain == "":
		err = errors.New("domain: required")
	case p.key == "":
		err = errors.New("key: required, the descriptor as key=value[,key2=value2]")
	case !strings.Contains(p.key, "="):
		err = fmt.Errorf("key: want key=value[,key2=value2], got %q", p.key)
	}
	if h.refused(w, err) {
		return
	}
	mins, err := h.query(r.Context(), func(ctx context.Context, s sink.Analytics) (any, error) {
		return s.Usage(ctx, sink.UsageQuery{Since: h.since(p.window), Domain: p.domain, Descriptor: p.key, Rule: p.rule})
	})
	if h.failed(w, "usage", err) {
		return
	}
	writeJSON(w, http.StatusOK, httpjson.Usage{Window: p.windowText, Domain: p.domain, Key: p.key, Minutes: mins.([]sink.MinuteUsage)})
}

func (h *Handler) rules(w http.ResponseWriter, r *http.Request) {
	p, err := h.params(r, "window", "domain")
	if h.refused(w, err) {
		return
	}
	rules, err := h.query(r.Context(), func(ctx context.Context, s sink.Analytics) (any, error) {
		return s.Rules(ctx, sink.RulesQuery{Since: h.since(p.window), Domain: p.domain})
	})
	if h.failed(w, "rules", err) {
		return
	}
	writeJSON(w, http.StatusOK, httpjson.Rules{Window: p.windowText, Rules: rules.([]sink.RuleUsage)})
}

func (h *Handler) timeline(w http.ResponseWriter, r *http.Request) {
	p, err := h.params(r, "window", "domain")
	if h.refused(w, err) {
		return
	}
	mins, err := h.query(r.Context(), func(ctx context.Context, s sink.Analytics) (any, error) {
		return s.Timeline(ctx, sink.TimelineQuery{Since: h.since(p.window), Domain: p.domain})
	})
	if h.failed(w, "timeline", err) {
		return
	}
	writeJSON(w, http.StatusOK, httpjson.Timeline{Window: p.windowText, Minutes: mins.([]sink.MinuteUsage)})
}

func (h *Handler) pools(w http.ResponseWriter, r *http.Request) {
	p, err := h.params(r, "window", "domain")
	if h.refused(w, err) {
		return
	}
	pools, err := h.query(r.Context(), func(ctx context.Context, s sink.Analytics) (any, error) {
		return s.Pools(ctx, sink.PoolsQuery{Since: h.since(p.window), Domain: p.domain})
	})
	if h.failed(w, "pools", err) {
		return
	}
	writeJSON(w, http.StatusOK, httpjson.Pools{Window: p.windowText, Pools: pools.([]sink.PoolUsage)})
}

// ruleChanges lists the rules store's changes, newest first (window 7d
// unless given, bounded by analytics.max_window).
func (h *Handler) ruleChanges(w http.ResponseWriter, r *http.Request) {
	p, err := h.params(r, "window", "domain", "limit")
	if h.refused(w, err) {
		return
	}
	if r.URL.Query().Get("window") == "" {
		p.window = min(7*day, h.access.MaxWindow)
		p.windowText = fmtWindow(p.window)
	}
	changes, err := h.query(r.Context(), func(ctx context.Context, _ sink.Analytics) (any, error) {
		if h.audit == nil {
			return nil, errOff
		}
		return h.audit.RuleChanges(ctx, sink.RuleChangesQuery{Since: h.since(p.window), Domain: p.domain, Limit: p.limit})
	})
	if h.failed(w, "rule changes", err) {
		return
	}
	out := changes.([]sink.RuleChange)
	if out == nil {
		out = []sink.RuleChange{}
	}
	writeJSON(w, http.StatusOK, httpjson.RuleChanges{Window: p.windowText, Changes: out})
}

// errOff marks a query refused because analytics are off.
var errOff = errors.New("analytics off")

// query runs f against the store with a bounded time.
func (h *Handler) query(ctx context.Context, f func(context.Context, sink.Analytics) (any, error)) (any, error) {
	if h.store == nil {
		return nil, errOff
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		return nil, errBusy
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return f(ctx, h.store)
}

func (h *Handler) refused(w http.ResponseWriter, err error) bool {
	if err == nil {
		return false
	}
	writeJSON(w, http.StatusBadRequest, httpjson.ErrorResponse{Error: err.Error()})
	return true
}

func (h *Handler) failed(w http.ResponseWriter, what string, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, errOff):
		writeJSON(w, http.StatusServiceUnavailable, httpjson.ErrorResponse{Error: h.off})
	case errors.Is(err, errBusy):
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, httpjson.ErrorResponse{Error: fmt.Sprintf("%d analytics queries are running (analytics.max_concurrent): try again shortly", h.access.MaxConcurrent)})
	default:
		h.logger.Warn("analytics query failed", "query", what, "error", err)
		writeJSON(w, http.StatusServiceUnavailable, httpjson.ErrorResponse{Error: "the analytics store did not answer: " + err.Error()})
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
