package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/internal/strictjson"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// UnitInFlight is the unit a concurrency rule's status shows: its limit
// is requests in flight, not per a time unit.
const UnitInFlight = "in_flight"

// MaxReleaseLeases bounds the leases one POST /v1/release names.
const MaxReleaseLeases = 100

var releaseSchema = strictjson.MustFor[httpjson.ReleaseRequest](
	strictjson.Bound{Path: "leases", Max: MaxReleaseLeases, What: "leases"})

// ReleaseHandler serves POST /v1/release over r: each lease a concurrency
// rule gave is released, on whatever checker decided it; the answer says,
// per lease, whether it was held. A lease id no checker issues is 400
// naming leases[i]; a store that does not answer 503 (retry: releasing is
// idempotent).
func ReleaseHandler(r ratelimit.LeaseReleaser, maxBody int64, log *logx.Limited) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var in httpjson.ReleaseRequest
		if !readPost(w, req, releaseSchema, maxBody, &in) {
			return
		}
		if len(in.Leases) == 0 {
			writeError(w, http.StatusBadRequest, "leases", "leases: want 1 to 100 lease ids")
			return
		}
		for i, l := range in.Leases { // every id first: a bad one releases nothing
			if _, err := ratelimit.ParseLease(l); err != nil {
				field := fmt.Sprintf("leases[%d]", i)
				writeError(w, http.StatusBadRequest, field, field+": "+err.Error())
				return
			}
		}
		out := httpjson.ReleaseResponse{Released: make([]bool, len(in.Leases))}
		for i, l := range in.Leases {
			ok, err := r.ReleaseLease(req.Context(), l)
			var fe *ratelimit.FieldError
			switch {
			case errors.As(err, &fe):
				field := fmt.Sprintf("leases[%d]", i)
				writeError(w, http.StatusBadRequest, field, field+": "+fe.Err.Error())
				return
			case errors.Is(err, counters.ErrStoreUnavailable):
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, "", err.Error())
				return
			case err != nil:
				if log != nil {
					log.Warn("release failed", "api", "/v1/release", "error", err)
				}
				writeError(w, http.StatusInternalServerError, "", err.Error())
				return
			}
			out.Released[i] = ok
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// InFlighter tells the leases in flight per concurrency rule
// (*checker.Checker does).
type InFlighter interface {
	InFlight(ctx context.Context) (map[string]int64, error)
	Rules() *config.RuleSet
}

// LeasesHandler serves GET /v1/leases: the leases in flight in the whole
// fleet per concurrency rule of the live rules, from the counter store.
func LeasesHandler(f InFlighter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if len(req.URL.Query()) > 0 {
			writeError(w, http.StatusBadRequest, "", "GET /v1/leases takes no parameters")
			return
		}
		n, err := f.InFlight(req.Context())
		if err != nil {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "", err.Error())
			return
		}
		out := httpjson.Leases{Rules: []httpjson.RuleLeases{}}
		for _, r := range f.Rules().Rules() {
			if r.Algorithm == config.AlgConcurrency {
				out.Rules = append(out.Rules, httpjson.RuleLeases{Rule: r.ID, InFlight: n[r.ID], MaxInFlight: r.Limit})
			}
		}
		slices.SortFunc(out.Rules, func(a, b httpjson.RuleLeases) int {
			if a.Rule < b.Rule {
				return -1
			}
			if a.Rule > b.Rule {
				return 1
			}
			return 0
		})
		writeJSON(w, http.StatusOK, out)
	})
}
