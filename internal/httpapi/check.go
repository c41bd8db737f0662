// Package httpapi serves velvetrope's HTTP JSON API: POST /v1/check and
// the health endpoints, on the one HTTP listener of a process.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/deferred"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/internal/strictjson"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// CheckRequest is the JSON body of POST /v1/check.
type CheckRequest struct {
	Domain      string           `json:"domain"`
	Descriptors []JSONDescriptor `json:"descriptors"`
	// Hits is the cost; missing means 1, an explicit 0 is a probe.
	Hits      *int64 `json:"hits,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// Payload is the work a deferred request carries to the rule's target
	// (used only when the decision is defer).
	Payload *deferred.Payload `json:"payload,omitempty"`
}

// JSONDescriptor is one descriptor of a CheckRequest.
type JSONDescriptor struct {
	Entries []JSONEntry `json:"entries"`
	// Hits, when present, is this descriptor's cost instead of the
	// request's.
	Hits *int64 `json:"hits,omitempty"`
}

// JSONEntry is one key=value pair.
type JSONEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// CheckResponse is the JSON answer of POST /v1/check.
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
	DeferError string       `json:"defer_error,omitempty"`
	Statuses   []JSONStatus `json:"statuses"`
}

// JSONStatus is the decision for one descriptor, in request order.
type JSONStatus struct {
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
}

// ErrorResponse is the JSON body of a 4xx/5xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// Option configures CheckHandler.
type Option func(*checkOptions)

type checkOptions struct {
	queue  deferred.Enqueuer
	bounds config.LimitsConfig
}

// WithQueue queues the requests an `on_exceed: defer` rule defers;
// without it such a request is refused (decision deny, with defer_error).
func WithQueue(q deferred.Enqueuer) Option { return func(o *checkOptions) { o.queue = q } }

// WithBounds decodes requests within b (zero fields: the defaults): give
// the checker's own, so that what the decoder lets through is what the
// checker takes. Without it: [config.DefaultLimits].
func WithBounds(b config.LimitsConfig) Option { return func(o *checkOptions) { o.bounds = b } }

// checkSchema is the shape of a CheckRequest within b.
func checkSchema(b config.LimitsConfig) *strictjson.Schema {
	return strictjson.MustFor[CheckRequest](append(strictjson.DescriptorBounds(b),
		strictjson.Bound{Path: "request_id", Max: b.WithDefaults().MaxRequestIDBytes, What: "bytes"})...)
}

// CheckHandler serves POST /v1/check over c, reading at most maxBody
// bytes. Decisions that fail for another reason than the request (500)
// are logged through log (rate-limited; nil: not logged).
func CheckHandler(c ratelimit.Checker, maxBody int64, log *logx.Limited, obs ratelimit.Observer, opts ...Option) http.Handler {
	var o checkOptions
	for _, f := range opts {
		f(&o)
	}
	schema := checkSchema(o.bounds)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "", "method "+r.Method+" not allowed; use POST")
			return
		}
		var in CheckRequest
		req, err := readCheck(w, r, schema, maxBody, &in)
		if err != nil {
			writeError(w, err.Status, err.Field, err.Error())
			return
		}
		req.NoDefer = o.queue == nil // refused, and counted so, where nothing queues
		var d ratelimit.Decision
		if err := c.Check(r.Context(), &req, &d); err != nil {
			var fe *ratelimit.FieldError
			if errors.As(err, &fe) {
				code := http.StatusBadRequest
				if errors.Is(err, ratelimit.ErrRequestIDConflict) {
					code = http.StatusConflict
				}
				writeError(w, code, fe.Field, fe.Error())
				return
			}
			if log != nil {
				log.Warn("check failed", "api", "/v1/check", "domain", in.Domain, "error", err)
			}
			writeError(w, http.StatusInternalServerError, "", err.Error())
			return
		}
		out := toResponse(&d)
		if d.Code == ratelimit.Deferred {
			rc, err := deferRequest(r.Context(), o.queue, &req, &d, in.Payload)
			var fe *ratelimit.FieldError
			switch {
			case errors.As(err, &fe):
				code := http.StatusBadRequest
				switch {
				case errors.Is(err, deferred.ErrPayloadTooLarge):
					code = http.StatusRequestEntityTooLarge
				case errors.Is(err, ratelimit.ErrRequestIDConflict), errors.Is(err, deferred.ErrRequestInFlight):
					code = http.StatusConflict
				}
				writeError(w, code, fe.Field, fe.Error())
				return
			case err != nil:
				// a full queue is a bound doing its work (counted in its
				// metric), not a fault to log
				if log != nil && o.queue != nil && !errors.Is(err, deferred.ErrQueueFull) {
					log.Warn("deferred request refused: not queued", "domain", in.Domain, "error", err)
				}
				// nothing was charged and nothing queued: a refusal
				d.Refuse()
				out = toResponse(&d)
				out.DeferError = err.Error()
			default:
				out.Ticket, out.RetryAfterMS = rc.Ticket, max(ceilMS(rc.ETA), 1)
			}
		}
		if o.queue == nil && d.Code == ratelimit.OverLimit && refusedByDeferring(&d) {
			out.DeferError = errNoQueue.Error() // why a deferring rule refused
		}
		if obs != nil {
			obs.Observe(&d)
		}
		ratelimit.SetHeaders(w.Header(), &d)
		writeJSON(w, http.StatusOK, out)
	})
}

// errNoQueue is a defer where no deferred queue is configured.
var errNoQueue = errors.New("deferred: no deferred queue here; the request is refused")

func deferRequest(ctx context.Context, q deferred.Enqueuer, req *ratelimit.Request, d *ratelimit.Decision, p *deferred.Payload) (deferred.Receipt, error) {
	if q == nil {
		return deferred.Receipt{}, errNoQueue
	}
	return q.Enqueue(ctx, req, d, p)
}

// refusedByDeferring reports whether a rule that defers refused d.
func refusedByDeferring(d *ratelimit.Decision) bool {
	for i := range d.Statuses {
		if st := &d.Statuses[i]; st.Code == ratelimit.OverLimit && st.Rule != nil && st.Rule.OnExceed == config.ExceedDefer {
			return true
		}
	}
	return false
}

// readCheck decodes the body of a POST /v1/check into in, strictly and
// within the bounds of schema, and returns the checker request it asks
// for.
func readCheck(w http.ResponseWriter, r *http.Request, schema *strictjson.Schema, maxBody int64, in *CheckRequest) (ratelimit.Request, *strictjson.Error) {
	if err := schema.Read(w, r, maxBody, in); err != nil {
		return ratelimit.Request{}, err.(*strictjson.Error)
	}
	return in.toRequest(), nil
}

func (in *CheckRequest) toRequest() ratelimit.Request {
	req := ratelimit.Request{Domain: in.Domain, Hits: 1, RequestID: in.RequestID}
	if in.Hits != nil {
		req.Hits = *in.Hits
	}
	req.Descriptors = make([]ratelimit.Descriptor, len(in.Descriptors))
	for i, d := range in.Descriptors {
		es := make([]config.Entry, len(d.Entries))
		for j, e := range d.Entries {
			es[j] = config.Entry{Key: e.Key, Value: e.Value}
		}
		req.Descriptors[i].Entries = es
		if d.Hits != nil {
			req.Descriptors[i].Hits, req.Descriptors[i].HasHits = *d.Hits, true
		}
	}
	return req
}

func toResponse(d *ratelimit.Decision) CheckResponse {
	out := CheckResponse{Decision: d.Code.String(), Statuses: make([]JSONStatus, len(d.Statuses))}
	for i, st := range d.Statuses {
		js := JSONStatus{Decision: st.Code.String(), Remaining: st.Remaining, ResetAfterMS: ceilMS(st.ResetAfter),
			RetryAfterMS: ceilMS(st.RetryAfter), RetryNever: st.RetryNever, Shadowed: st.Shadowed, OverSoft: st.OverSoft,
			Elastic: st.Elastic, Degraded: st.Degraded}
		if r := st.Rule; r != nil {
			js.Rule, js.Unlimited = r.ID, r.Unlimited
			if !r.Unlimited {
				js.Limit, js.Unit = r.Limit, r.Unit.String()
			}
		}
		out.Statuses[i] = js
	}
	return out
}

func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, field, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg, Field: field})
}
