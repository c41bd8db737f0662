package httpapi

import (
	"errors"
	"net/http"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/internal/strictjson"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// chargeSchema is the shape of an [httpjson.ChargeRequest] within b.
func chargeSchema(b config.LimitsConfig) *strictjson.Schema {
	return strictjson.MustFor[httpjson.ChargeRequest](append(strictjson.DescriptorBounds(b),
		strictjson.Bound{Path: "request_id", Max: b.WithDefaults().MaxRequestIDBytes, What: "bytes"})...)
}

// readPost reads a POST's body into in, strictly and within schema and
// maxBody; false: it answered the error (405 for another method, the
// decoder's 400 or 413 naming the field).
func readPost(w http.ResponseWriter, r *http.Request, schema *strictjson.Schema, maxBody int64, in any) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "", "method "+r.Method+" not allowed; use POST")
		return false
	}
	if err := schema.Read(w, r, maxBody, in); err != nil {
		se := err.(*strictjson.Error)
		writeError(w, se.Status, se.Field, se.Error())
		return false
	}
	return true
}

// ChargeHandler serves POST /v1/charge over c: a cost known after the
// response, counted whatever the counters hold and never refused (the
// answer's decision is always allow; each status says what remains). A
// store that cannot take a `mode: sync` rule's charge answers 503 with
// nothing counted: retry with the same request_id.
func ChargeHandler(c ratelimit.Checker, maxBody int64, log *logx.Limited, opts ...Option) http.Handler {
	var o checkOptions
	for _, f := range opts {
		f(&o)
	}
	schema := chargeSchema(o.bounds)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in httpjson.ChargeRequest
		if !readPost(w, r, schema, maxBody, &in) {
			return
		}
		hits := in.Hits
		if hits == nil {
			every := len(in.Descriptors) > 0
			for _, d := range in.Descriptors {
				every = every && d.Hits != nil
			}
			if !every {
				writeError(w, http.StatusBadRequest, "hits", "hits: required: the cost to charge (0 counts nothing), unless every descriptor has its own")
				return
			}
			hits = new(int64)
		}
		req := toRequest(&httpjson.CheckRequest{Domain: in.Domain, Descriptors: in.Descriptors, Hits: hits, RequestID: in.RequestID})
		req.Charge, req.NoDefer = true, true
		var d ratelimit.Decision
		if err := c.Check(r.Context(), &req, &d); err != nil {
			var fe *ratelimit.FieldError
			switch {
			case errors.As(err, &fe):
				code := http.StatusBadRequest
				if errors.Is(err, ratelimit.ErrRequestIDConflict) || errors.Is(err, ratelimit.ErrRequestIDInFlight) {
					code = http.StatusConflict
				}
				writeError(w, code, fe.Field, fe.Error())
			case errors.Is(err, counters.ErrStoreUnavailable):
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, "", err.Error())
			default:
				if log != nil {
					log.Warn("charge failed", "api", "/v1/charge", "domain", in.Domain, "error", err)
				}
				writeError(w, http.StatusInternalServerError, "", err.Error())
			}
			return
		}
		ratelimit.SetHeaders(w.Header(), &d)
		writeJSON(w, http.StatusOK, toResponse(&d))
	})
}
