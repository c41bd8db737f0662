package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// HTTP calls the native JSON API (POST /v1/check) of a velvetrope checker.
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

type jsonEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type jsonRequest struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries []jsonEntry `json:"entries"`
		Hits    *uint64     `json:"hits,omitempty"`
	} `json:"descriptors"`
	Hits      uint64 `json:"hits"`
	RequestID string `json:"request_id,omitempty"`
}

type jsonResponse struct {
	Decision string `json:"decision"`
	Statuses []struct {
		Decision     string `json:"decision"`
		Rule         string `json:"rule"`
		Limit        uint64 `json:"limit"`
		Unit         string `json:"unit"`
		Remaining    uint64 `json:"remaining"`
		ResetAfterMS int64  `json:"reset_after_ms"`
		Unlimited    bool   `json:"unlimited"`
	} `json:"statuses"`
	Error string `json:"error"`
	Field string `json:"field"`
}

// Check asks for a decision. A 400 answer wraps ErrInvalidArgument with
// the field the service named.
func (h *HTTP) Check(ctx context.Context, req Request) (Response, error) {
	in := jsonRequest{Domain: req.Domain, Hits: uint64(max(req.Hits, 1)), RequestID: req.RequestID}
	in.Descriptors = make([]struct {
		Entries []jsonEntry `json:"entries"`
		Hits    *uint64     `json:"hits,omitempty"`
	}, len(req.Descriptors))
	for i, d := range req.Descriptors {
		for _, e := range d.Entries {
			in.Descriptors[i].Entries = append(in.Descriptors[i].Entries, jsonEntry(e))
		}
		in.Descriptors[i].Hits = d.Hits
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
	var out jsonResponse
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
			Limited: s.Rule != "" && !s.Unlimited, Limit: s.Limit, Unit: s.Unit, Remaining: s.Remaining,
			ResetAfter: time.Duration(s.ResetAfterMS) * time.Millisecond}
		if !resp.Statuses[i].Limited {
			resp.Statuses[i].Limit, resp.Statuses[i].Remaining = 0, 0
		}
	}
	return resp, nil
}
