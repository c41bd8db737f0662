package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/httpjson"
)

// HTTP calls the native JSON API (POST /v1/check) of a velvetrope checker,
// in the service's own types (package httpjson).
type HTTP struct {
	base string
	hc   *http.Client
}

// NewHTTP calls the service at base (e.g. "http://127.0.0.1:8080") with hc
// (nil: a client with a timeout of timeout).
func NewHTTP(base string, hc *http.Client, timeout time.Duration) *HTTP {
	if hc == nil {
		hc = &http.Client{Timeout: timeout}
	}
	return &HTTP{base: strings.TrimRight(base, "/"), hc: hc}
}

// answer is any answer of POST /v1/check: a decision, or a refusal's
// error body.
type answer struct {
	httpjson.CheckResponse
	httpjson.ErrorResponse
}

// Check asks for a decision. A 400 answer wraps ErrInvalidArgument with
// the field the service named; a descriptor's hits above math.MaxInt64,
// which the API's integers cannot carry, are refused so without a call,
// as the service refuses them.
func (h *HTTP) Check(ctx context.Context, req Request) (Response, error) {
	for i, d := range req.Descriptors {
		if d.Release { // not a field of the HTTP API: a check would acquire a lease instead
			return Response{}, fmt.Errorf("%w: descriptors[%d]: Release is gRPC only (Envoy's is_negative_hits); over HTTP, Release the lease ids",
				ErrInvalidArgument, i)
		}
	}
	hits := int64(max(req.Hits, 1))
	in := httpjson.CheckRequest{Domain: req.Domain, Hits: &hits, RequestID: req.RequestID}
	var err error
	if in.Descriptors, err = toJSON(req.Descriptors); err != nil {
		return Response{}, err
	}
	return h.post(ctx, "/v1/check", in)
}

// Charge counts a cost known after the response (POST /v1/charge):
// req.Hits (0 counts nothing) or a descriptor's Hits, whatever the
// counters hold, never refused; the statuses say what remains. With
// req.RequestID a retry is counted once, and a charge with no descriptors
// charges those of the check the same checker decided under that id. A
// store that cannot take the charge answers an error wrapping
// ErrUnavailable: retry with the same request id.
func (h *HTTP) Charge(ctx context.Context, req Request) (Response, error) {
	hits := int64(req.Hits)
	in := httpjson.ChargeRequest{Domain: req.Domain, Hits: &hits, RequestID: req.RequestID}
	var err error
	if in.Descriptors, err = toJSON(req.Descriptors); err != nil {
		return Response{}, err
	}
	return h.post(ctx, "/v1/charge", in)
}

// Release gives back the leases concurrency rules gave (a Status's Lease),
// on whatever checker decided them (POST /v1/release): released says, per
// lease, whether it was held (false: released already, or expired). At
// most 100 leases a call; text that is not a lease id wraps
// ErrInvalidArgument, a store that does not answer ErrUnavailable.
func (h *HTTP) Release(ctx context.Context, leases ...string) (released []bool, err error) {
	body, err := json.Marshal(httpjson.ReleaseRequest{Leases: leases})
	if err != nil {
		return nil, fmt.Errorf("client: encoding the request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/v1/release", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := h.hc.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("client: POST /v1/release: %w", err)
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("client: reading the answer: %w", err)
	}
	var out struct {
		httpjson.ReleaseResponse
		httpjson.ErrorResponse
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("client: POST /v1/release answered %d with undecodable JSON: %w", hresp.StatusCode, err)
	}
	switch hresp.StatusCode {
	case http.StatusOK:
		return out.Released, nil
	case http.StatusBadRequest:
		return nil, fmt.Errorf("%w: %s", ErrInvalidArgument, out.Error)
	case http.StatusServiceUnavailable:
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, out.Error)
	}
	return nil, fmt.Errorf("client: POST /v1/release answered %d: %s", hresp.StatusCode, out.Error)
}

// toJSON is ds as the API's descriptors; hits above math.MaxInt64, which
// the API's integers cannot carry, are refused without a call, as the
// service refuses them.
func toJSON(ds []Descriptor) ([]httpjson.Descriptor, error) {
	out := make([]httpjson.Descriptor, len(ds))
	for i, d := range ds {
		for _, e := range d.Entries {
			out[i].Entries = append(out[i].Entries, httpjson.Entry(e))
		}
		if d.Hits != nil {
			if *d.Hits > math.MaxInt64 { // the API's hits are int64: what the service would answer
				field := fmt.Sprintf("descriptors[%d].hits", i)
				return nil, fmt.Errorf("%w: %s: %s: %d is out of range (64 bits)", ErrInvalidArgument, field, field, *d.Hits)
			}
			h := int64(*d.Hits)
			out[i].Hits = &h
		}
	}
	return out, nil
}

// post sends in to path and reads the decision it answers.
func (h *HTTP) post(ctx context.Context, path string, in any) (Response, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return Response{}, fmt.Errorf("client: encoding the request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+path, bytes.NewReader(body))
	if err != nil {
		return Response{}, fmt.Errorf("client: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := h.hc.Do(hreq)
	if err != nil {
		return Response{}, fmt.Errorf("client: POST %s: %w", path, err)
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, 4<<20))
	if err != nil {
		return Response{}, fmt.Errorf("client: reading the answer: %w", err)
	}
	var out answer
	if err := json.Unmarshal(raw, &out); err != nil {
		return Response{}, fmt.Errorf("client: POST %s answered %d with undecodable JSON: %w", path, hresp.StatusCode, err)
	}
	switch {
	case hresp.StatusCode == http.StatusBadRequest, hresp.StatusCode == http.StatusConflict:
		msg := out.Error
		if out.Field != "" && !strings.HasPrefix(msg, out.Field+":") { // the service's messages name their field already
			msg = out.Field + ": " + msg
		}
		return Response{}, fmt.Errorf("%w: %s", ErrInvalidArgument, msg)
	case hresp.StatusCode == http.StatusServiceUnavailable:
		return Response{}, fmt.Errorf("%w: %s", ErrUnavailable, out.Error)
	case hresp.StatusCode != http.StatusOK:
		return Response{}, fmt.Errorf("client: POST %s answered %d: %s", path, hresp.StatusCode, out.Error)
	}
	resp := Response{OverLimit: out.Decision == "deny", Statuses: make([]Status, len(out.Statuses))}
	for i, s := range out.Statuses {
		resp.Statuses[i] = Status{OverLimit: s.Decision == "deny", Unlimited: s.Unlimited,
			Limited: s.Rule != "" && !s.Unlimited, Limit: uint64(s.Limit), Unit: s.Unit, Remaining: uint64(s.Remaining),
			ResetAfter: time.Duration(s.ResetAfterMS) * time.Millisecond, Lease: s.Lease}
		if !resp.Statuses[i].Limited {
			resp.Statuses[i].Limit, resp.Statuses[i].Remaining = 0, 0
		}
	}
	return resp, nil
}
