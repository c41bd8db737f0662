package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/testrules"
)

// TestLeasesOverHTTP: an admission under a concurrency rule tells its
// lease, Release gives it back once, and a descriptor marked Release,
// which the HTTP API has no field for, is refused rather than acquiring.
func TestLeasesOverHTTP(t *testing.T) {
	bus, err := events.NewMemBus(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rules := "domain: jobs\ndescriptors:\n  - key: tenant\n    concurrency: {max_in_flight: 1}\n"
	c, err := checker.New(checker.Config{}, testrules.Store(t, rules), counters.NewMemStore(), bus, testrules.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/check", httpapi.CheckHandler(c, 1<<20, nil, nil))
	mux.Handle("/v1/release", httpapi.ReleaseHandler(c, 1<<20, nil))
	hs := httptest.NewServer(mux)
	defer hs.Close()
	h := NewHTTP(hs.URL, nil, 2*time.Second)
	ctx := context.Background()
	req := Request{Domain: "jobs", Descriptors: []Descriptor{one("tenant", "acme")}}
	first, err := h.Check(ctx, req)
	if err != nil || first.OverLimit || first.Statuses[0].Lease == "" {
		t.Fatalf("first: %+v %v", first, err)
	}
	if second, _ := h.Check(ctx, req); !second.OverLimit {
		t.Fatalf("a second in flight of 1: %+v", second)
	}
	released, err := h.Release(ctx, first.Statuses[0].Lease, first.Statuses[0].Lease)
	if err != nil || len(released) != 2 || !released[0] || released[1] {
		t.Fatalf("release: %v %v", released, err)
	}
	if third, _ := h.Check(ctx, req); third.OverLimit {
		t.Fatal("refused after the release")
	}
	if _, err := h.Release(ctx, "not a lease"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a bad id: %v", err)
	}
	rel := req
	rel.Descriptors = []Descriptor{{Entries: []Entry{{"tenant", "acme"}}, Release: true}}
	if _, err := h.Check(ctx, rel); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Release over HTTP: %v, want ErrInvalidArgument", err)
	}
}
