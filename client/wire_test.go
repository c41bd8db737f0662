package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/analytics"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/ratelimit"
	"github.com/velvetrope/velvetrope/sink"
)

// recorder is a checker that keeps the request it was asked and answers
// the decision it was given.
type recorder struct {
	got    *ratelimit.Request
	answer ratelimit.Decision
}

func (r *recorder) Check(_ context.Context, req *ratelimit.Request, d *ratelimit.Decision) error {
	cp := *req
	r.got = &cp
	d.Code, d.Statuses = r.answer.Code, append(d.Statuses[:0], r.answer.Statuses...)
	return nil
}

// TestWireRoundTrip holds the client and the server to one wire: every
// field of a request, set to a value of its own, reaches the checker
// through the client's encoding and the server's strict decoding, and
// every field of a decision reaches the caller through the server's
// encoding and the client's decoding; the analytics answers likewise.
// A field one side drops, renames or reads as another is a difference
// here.
func TestWireRoundTrip(t *testing.T) {
	five := uint64(5)
	rule := &config.Rule{ID: "dom:k1/k2", Limit: 70, Unit: config.Hour, Window: time.Hour}
	rec := &recorder{answer: ratelimit.Decision{Code: ratelimit.OverLimit, Statuses: []ratelimit.Status{
		{Code: ratelimit.OverLimit, Rule: rule, Limit: 70, Remaining: 3, ResetAfter: 4321 * time.Millisecond,
			RetryAfter: 1234 * time.Millisecond},
		{Code: ratelimit.OK, Rule: &config.Rule{ID: "dom:k3", Unlimited: true}, ResetAfter: 17 * time.Millisecond},
		{Code: ratelimit.OK, ResetAfter: 29 * time.Millisecond},
	}}}
	hs := httptest.NewServer(httpapi.CheckHandler(rec, 1<<20, nil, nil))
	t.Cleanup(hs.Close)
	h := NewHTTP(hs.URL, nil, 2*time.Second)

	got, err := h.Check(context.Background(), Request{Domain: "dom", Hits: 9, RequestID: "rid-1", Descriptors: []Descriptor{
		{Entries: []Entry{{"k1", "v1"}, {"k2", "v2"}}, Hits: &five},
		{Entries: []Entry{{"k3", "v3"}}},
		{Entries: []Entry{{"k4", ""}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantReq := ratelimit.Request{Domain: "dom", Hits: 9, RequestID: "rid-1", NoDefer: true, Descriptors: []ratelimit.Descriptor{
		{Entries: []config.Entry{{Key: "k1", Value: "v1"}, {Key: "k2", Value: "v2"}}, Hits: 5, HasHits: true},
		{Entries: []config.Entry{{Key: "k3", Value: "v3"}}},
		{Entries: []config.Entry{{Key: "k4"}}},
	}}
	if rec.got == nil || !reflect.DeepEqual(*rec.got, wantReq) {
		t.Fatalf("the checker was asked\n %+v\nwant %+v", rec.got, wantReq)
	}
	want := Response{OverLimit: true, Statuses: []Status{
		{OverLimit: true, Limited: true, Limit: 70, Unit: "hour", Remaining: 3, ResetAfter: 4321 * time.Millisecond},
		{Unlimited: true, ResetAfter: 17 * time.Millisecond},
		{ResetAfter: 29 * time.Millisecond},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the caller was answered\n %+v\nwant %+v", got, want)
	}

	// a 400 names the field the server named; descriptor hits the API's
	// integers cannot carry are refused as the server refuses them
	huge := uint64(math.MaxUint64)
	_, err = h.Check(context.Background(), Request{Domain: "dom", Descriptors: []Descriptor{
		{Entries: []Entry{{"k1", "v1"}}}, {Entries: []Entry{{"k1", "v1"}}, Hits: &huge}}})
	resp, herr := http.Post(hs.URL+"/v1/check", "application/json", bytes.NewReader([]byte(
		`{"domain":"dom","descriptors":[{"entries":[{"key":"k1","value":"v1"}]},{"entries":[{"key":"k1","value":"v1"}],"hits":18446744073709551615}],"hits":1}`)))
	if herr != nil {
		t.Fatal(herr)
	}
	defer resp.Body.Close()
	var e httpjson.ErrorResponse
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 400 {
		t.Fatalf("the server answered %d %+v, %v; want 400", resp.StatusCode, e, err)
	}
	if want := ErrInvalidArgument.Error() + ": " + e.Field + ": " + e.Error; !errors.Is(err, ErrInvalidArgument) || err.Error() != want {
		t.Fatalf("hits %d: got %v, want %s", huge, err, want)
	}

	// the analytics: the store's rows, as the client reads them
	now := time.Now().Truncate(time.Minute)
	store := sink.NewMemory(time.Hour)
	pool := config.InternalRuleID("dom", "#pool", "p1")
	if err := store.Insert(context.Background(), []sink.Row{
		{Minute: now.Unix(), Domain: "dom", Rule: "dom:k1", Descriptor: "k1=v1", Instance: "i", Stream: 1, Version: 1,
			Allowed: 11, Denied: 12, Deferred: 13, ShadowDenied: 14, OverSoft: 15, Elastic: 16, AllowedCost: 17, DeniedCost: 18},
		{Minute: now.Unix(), Domain: "dom", Rule: "dom:k2", Descriptor: "k2=v2", Instance: "i", Stream: 2, Version: 1, Denied: 1},
		{Minute: now.Unix(), Domain: "other", Rule: "other:k1", Descriptor: "k1=v1", Instance: "i", Stream: 3, Version: 1, Denied: 99},
		{Minute: now.Unix(), Domain: "dom", Rule: pool, Descriptor: "", Instance: "i", Stream: 4, Version: 1, Pool: true,
			Allowed: 21, AllowedCost: 22, Denied: 23, Deferred: 24},
	}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	analytics.New(store, "", nil).WithAccess(analytics.Access{Token: "tok"}).Register(mux)
	as := httptest.NewServer(mux)
	t.Cleanup(as.Close)
	ah := NewHTTP(as.URL, nil, 2*time.Second)
	since := now.Add(-15 * time.Minute)

	top, err := ah.TopDenied(context.Background(), TopQuery{Window: "15m", Domain: "dom", Rule: "dom:k1", Limit: 7, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := store.TopDenied(context.Background(), sink.TopQuery{Since: since, Domain: "dom", Rule: "dom:k1", Limit: 7})
	wantTop := TopDenied{Window: "15m", Keys: []DeniedKey{{Domain: "dom", Rule: "dom:k1", Descriptor: "k1=v1",
		Denied: 12, Allowed: 11, Deferred: 13, ShadowDenied: 14, OverSoft: 15, Elastic: 16}}}
	if !reflect.DeepEqual(top, wantTop) || !reflect.DeepEqual(keys, wantTop.Keys) {
		t.Fatalf("top denied: got %+v, want %+v (the store: %+v)", top, wantTop, keys)
	}
	pools, err := ah.Pools(context.Background(), PoolsQuery{Window: "15m", Domain: "dom", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	wantPools := Pools{Window: "15m", Pools: []PoolUsage{{Domain: "dom", Pool: "p1", Rule: pool, Borrowed: 21, BorrowedHits: 22, Refused: 47}}}
	if !reflect.DeepEqual(pools, wantPools) {
		t.Fatalf("pools: got %+v, want %+v", pools, wantPools)
	}
	// an analytics refusal: its error body, read
	_, err = ah.Pools(context.Background(), PoolsQuery{Window: "1s", Token: "tok"})
	if want := "invalid request: window: want 1m to 7d, got 1s"; err == nil || err.Error() != want {
		t.Fatalf("a refused window: got %v, want %s", err, want)
	}
}
