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
	hits := int64(max(req.Hits, 1))
	in := httpjson.CheckRequest{Domain: req.Domain, Hits: &hits, RequestID: req.RequestID,
		Descriptors: make([]httpjson.Descriptor, len(req.Descriptors))}
	for i, d := range req.Descriptors {
		for _, e := range d.Entries {
			in.Descriptors[i].Entries = append(in.Descriptors[i].Entries, httpjson.Entry(e))
		}
		if d.Hits != nil {
			if *d.Hits > math.MaxInt64 { // the API's hits are int64: what the service would answer
				field := fmt.Sprintf("descriptors[%d].hits", i)
				return Response{}, fmt.Errorf("%w: %s: %s: %d is out of range (64 bits)", ErrInvalidArgument, field, field, *d.Hits)
			}
			h := int64(*d.Hits)
			in.Descriptors[i].Hits = &h
		}
	}
	body, err := json.Marshal(in)
	if err != nil {
		return Response{}, fmt.Errorf("client: encoding the request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/v1/check", bytes.NewReader(body))
	if err != nil {
		return Response{}, fmt.Errorf("client: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := h.hc.Do(hreq)
	if err != nil {
		return Response{}, fmt.Errorf("client: POST /v1/check: %w", err)
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, 4<<20))
	if err != nil {
		return Response{}, fmt.Errorf("client: reading the answer: %w", err)
	}
	var out answer
	if err := json.Unmarshal(raw, &out); err != nil {
		return Response{}, fmt.Errorf("client: POST /v1/check answered %d with undecodable JSON: %w", hresp.StatusCode, err)
	}
	switch {
	case hresp.StatusCode == http.StatusBadRequest:
		return Response{}, fmt.Errorf("%w: %s: %s", ErrInvalidArgument, out.Field, out.Error)
	case hresp.StatusCode != http.StatusOK:
		return Response{}, fmt.Errorf("client: POST /v1/check answered %d: %s", hresp.StatusCode, out.Error)
	}
	resp := Response{OverLimit: out.Decision == "deny", Statuses: make([]Status, len(out.Statuses))}
	for i, s := range out.Statuses {
		resp.Statuses[i] = Status{OverLimit: s.Decision == "deny", Unlimited: s.Unlimited,
			Limited: s.Rule != "" && !s.Unlimited, Limit: uint64(s.Limit), Unit: s.Unit, Remaining: uint64(s.Remaining),
			ResetAfter: time.Duration(s.ResetAfterMS) * time.Millisecond}
		if !resp.Statuses[i].Limited {
			resp.Statuses[i].Limit, resp.Statuses[i].Remaining = 0, 0
		}
	}
	return resp, nil
}
