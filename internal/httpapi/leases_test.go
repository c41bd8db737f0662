package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/httpjson"
)

func leaseMux(t *testing.T) http.Handler {
	t.Helper()
	f, err := config.ParseRules("jobs.yaml", []byte("domain: jobs\ndescriptors:\n  - key: tenant\n    concurrency: {max_in_flight: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	bus, err := events.NewMemBus(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checker.New(checker.Config{}, config.NewStore(rs), counters.NewMemStore(), bus, fixedClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/check", CheckHandler(c, 4096, nil, nil))
	mux.Handle("/v1/release", ReleaseHandler(c, 4096, nil))
	mux.Handle("GET /v1/leases", LeasesHandler(c))
	return mux
}

// TestLeasesOverHTTP: an admission under a concurrency rule answers its
// lease (body and RateLimit-Lease) with the unit in_flight; GET
// /v1/leases counts it; POST /v1/release gives it back once (the answer
// says whether each lease was held); bad lease ids name their index.
func TestLeasesOverHTTP(t *testing.T) {
	mux := leaseMux(t)
	rec := postTo(mux, "/v1/check", `{"domain":"jobs","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`)
	var got httpjson.CheckResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Decision != "allow" {
		t.Fatalf("check: %s", rec.Body)
	}
	st := got.Statuses[0]
	if st.Lease == "" || st.Unit != UnitInFlight || st.Limit != 2 || st.Remaining != 1 ||
		rec.Header().Get("RateLimit-Lease") != `"`+st.Lease+`"` {
		t.Fatalf("status %+v, header %q", st, rec.Header().Get("RateLimit-Lease"))
	}
	leases := func() httpjson.Leases {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/leases", nil))
		var l httpjson.Leases
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || rec.Code != 200 {
			t.Fatalf("leases: %d %s", rec.Code, rec.Body)
		}
		return l
	}
	if l := leases(); len(l.Rules) != 1 || l.Rules[0] != (httpjson.RuleLeases{Rule: "jobs:tenant", InFlight: 1, MaxInFlight: 2}) {
		t.Fatalf("leases %+v", l)
	}
	body := `{"leases":["` + st.Lease + `","` + st.Lease + `"]}`
	rec = postTo(mux, "/v1/release", body)
	var rel httpjson.ReleaseResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &rel); err != nil || rec.Code != 200 || len(rel.Released) != 2 || !rel.Released[0] || rel.Released[1] {
		t.Fatalf("release: %d %s", rec.Code, rec.Body)
	}
	if l := leases(); l.Rules[0].InFlight != 0 {
		t.Fatalf("after the release: %+v", l)
	}
	// a bad id among good ones releases none of them
	rec = postTo(mux, "/v1/check", `{"domain":"jobs","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`)
	_ = json.Unmarshal(rec.Body.Bytes(), &got)
	if rec := postTo(mux, "/v1/release", `{"leases":["`+got.Statuses[0].Lease+`","nope"]}`); rec.Code != 400 {
		t.Fatalf("a bad id: %d", rec.Code)
	}
	if l := leases(); l.Rules[0].InFlight != 1 {
		t.Fatalf("a release with a bad id released: %+v", l)
	}
	for _, c := range []struct{ body, field string }{
		{`{"leases":[]}`, "leases"},
		{`{"leases":["` + st.Lease + `","nope"]}`, "leases[1]"},
		{`{"leases":["x.y"]}`, "leases[0]"},
		{`{"lease":"x"}`, "lease"},
		{`{"leases":[` + strings.Repeat(`"a",`, 100) + `"a"]}`, "leases"},
	} {
		rec := postTo(mux, "/v1/release", c.body)
		var e httpjson.ErrorResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != 400 || e.Field != c.field {
			t.Errorf("%s: %d %q (%s), want 400 %q", c.body, rec.Code, e.Field, e.Error, c.field)
		}
	}
}
