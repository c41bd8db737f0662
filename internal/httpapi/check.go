// Package httpapi serves velvetrope's HTTP JSON API: POST /v1/check,
// GET /v1/deferred/{ticket} and the health endpoints, on the one HTTP
// listener of a process. The bodies are package httpjson's, the types the
// Go client sends and reads.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/deferred"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/internal/strictjson"
	"github.com/velvetrope/velvetrope/ratelimit"
)

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

// checkSchema is the shape of an [httpjson.CheckRequest] within b.
func checkSchema(b config.LimitsConfig) *strictjson.Schema {
	return strictjson.MustFor[httpjson.CheckRequest](append(strictjson.DescriptorBounds(b),
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
		var in httpjson.CheckRequest
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
				if errors.Is(err, ratelimit.ErrRequestIDConflict) || errors.Is(err, ratelimit.ErrRequestIDInFlight) {
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
			rc, err := deferRequest(r.Context(), o.queue, &req, &d, (*deferred.Payload)(in.Payload))
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
func readCheck(w http.ResponseWriter, r *http.Request, schema *strictjson.Schema, maxBody int64, in *httpjson.CheckRequest) (ratelimit.Request, *strictjson.Error) {
	if err := schema.Read(w, r, maxBody, in); err != nil {
		return ratelimit.Request{}, err.(*strictjson.Error)
	}
	if in.Payload != nil && len(in.Payload.Headers) == 0 {
		in.Payload.Headers = nil // "headers":{} is no headers: one request, one form (a deferred item carries none either way)
	}
	return toRequest(in), nil
}

// toRequest is the checker request in asks for.
func toRequest(in *httpjson.CheckRequest) ratelimit.Request {
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

// toResponse is d as the API answers it.
func toResponse(d *ratelimit.Decision) httpjson.CheckResponse {
	out := httpjson.CheckResponse{Decision: d.Code.String(), Statuses: make([]httpjson.Status, len(d.Statuses))}
	for i, st := range d.Statuses {
		js := httpjson.Status{Decision: st.Code.String(), Remaining: st.Remaining, ResetAfterMS: ceilMS(st.ResetAfter),
			RetryAfterMS: ceilMS(st.RetryAfter), RetryNever: st.RetryNever, Shadowed: st.Shadowed, OverSoft: st.OverSoft,
			Elastic: st.Elastic, Degraded: st.Degraded, Lease: st.Lease}
		if r := st.Rule; r != nil {
			js.Rule, js.Unlimited = r.ID, r.Unlimited
			if !r.Unlimited {
				js.Limit, js.Unit = r.Limit, r.Unit.String()
			}
			if r.Algorithm == config.AlgConcurrency {
				js.Unit = UnitInFlight
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
	writeJSON(w, status, httpjson.ErrorResponse{Error: msg, Field: field})
}
