package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// DeniedKey is one row of the top denied keys.
type DeniedKey struct {
	Domain     string `json:"domain"`
	Rule       string `json:"rule"`
	Descriptor string `json:"descriptor"`
	Denied     uint64 `json:"denied"`
	Allowed    uint64 `json:"allowed"`
	Deferred   uint64 `json:"deferred"`
}

// TopDenied is the answer of GET /v1/analytics/top-denied.
type TopDenied struct {
	Window string      `json:"window"`
	Keys   []DeniedKey `json:"keys"`
}

// TopQuery selects the top denied keys: window as the service reads it
// ("1h", "7d"; empty: 1h), optional domain and rule, limit (0: 10).
type TopQuery struct {
	Window, Domain, Rule string
	Limit                int
	// Token is the analytics token, sent as a bearer token when set.
	Token string
}

// TopDenied asks for the most denied keys over a window. A 400 answer
// wraps ErrInvalidArgument with the service's message (it names the
// parameter); a 503 means analytics are off or their store is down.
func (h *HTTP) TopDenied(ctx context.Context, q TopQuery) (TopDenied, error) {
	v := url.Values{}
	for k, s := range map[string]string{"window": q.Window, "domain": q.Domain, "rule": q.Rule} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	u := h.base + "/v1/analytics/top-denied"
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return TopDenied{}, fmt.Errorf("client: %w", err)
	}
	if q.Token != "" {
		req.Header.Set("Authorization", "Bearer "+q.Token)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return TopDenied{}, fmt.Errorf("client: GET /v1/analytics/top-denied: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return TopDenied{}, fmt.Errorf("client: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		if resp.StatusCode == http.StatusBadRequest {
			return TopDenied{}, fmt.Errorf("%w: %s", ErrInvalidArgument, e.Error)
		}
		return TopDenied{}, fmt.Errorf("client: GET /v1/analytics/top-denied answered %d: %s", resp.StatusCode, e.Error)
	}
	var out TopDenied
	if err := json.Unmarshal(raw, &out); err != nil {
		return TopDenied{}, fmt.Errorf("client: top-denied answered undecodable JSON: %w", err)
	}
	return out, nil
}
