package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/velvetrope/velvetrope/httpjson"
)

// DeniedKey is one row of the top denied keys: its decisions over the
// window as their callers were answered (a shadow rule's would-be
// refusals, admitted, are ShadowDenied and not Allowed; OverSoft and
// Elastic are admissions, of Allowed, above the rule's own limit).
type DeniedKey = httpjson.KeyUsage

// TopDenied is the answer of GET /v1/analytics/top-denied.
type TopDenied = httpjson.TopDenied

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
	var out TopDenied
	if err := h.analytics(ctx, "top-denied", v, q.Token, &out); err != nil {
		return TopDenied{}, err
	}
	return out, nil
}

// PoolUsage is one elastic pool's borrowings over a window: admissions
// that borrowed from it, their hits, and the borrowings it refused.
type PoolUsage = httpjson.PoolUsage

// Pools is the answer of GET /v1/analytics/pools.
type Pools = httpjson.Pools

// PoolsQuery selects the pools: window as for TopQuery, optional domain.
type PoolsQuery struct {
	Window, Domain string
	// Token is the analytics token, sent as a bearer token when set.
	Token string
}

// Pools asks for every pool's borrowings over a window; errors as for
// TopDenied.
func (h *HTTP) Pools(ctx context.Context, q PoolsQuery) (Pools, error) {
	v := url.Values{}
	for k, s := range map[string]string{"window": q.Window, "domain": q.Domain} {
		if s != "" {
			v.Set(k, s)
		}
	}
	var out Pools
	if err := h.analytics(ctx, "pools", v, q.Token, &out); err != nil {
		return Pools{}, err
	}
	return out, nil
}

// analytics GETs /v1/analytics/<what> with v and decodes the answer into
// out.
func (h *HTTP) analytics(ctx context.Context, what string, v url.Values, token string, out any) error {
	u := h.base + "/v1/analytics/" + what
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: GET /v1/analytics/%s: %w", what, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("client: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e httpjson.ErrorResponse
		_ = json.Unmarshal(raw, &e)
		if resp.StatusCode == http.StatusBadRequest {
			return fmt.Errorf("%w: %s", ErrInvalidArgument, e.Error)
		}
		return fmt.Errorf("client: GET /v1/analytics/%s answered %d: %s", what, resp.StatusCode, e.Error)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("client: %s answered undecodable JSON: %w", what, err)
	}
	return nil
}
