package rls

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/velvetrope/velvetrope/config"
)

// TestUnknownDomainTrailer: over gRPC an unknown domain answers OK, as
// Envoy's service does, with the trailer naming the known domains; a
// known domain's answer carries none.
func TestUnknownDomainTrailer(t *testing.T) {
	conn := dialRaw(t, newTestServer(t, Options{}))
	c := rlsv3.NewRateLimitServiceClient(conn)
	cases := []struct {
		domain  string
		trailer []string // nil: none
	}{
		{"nope", []string{"edge_proxy_per_ip,example4,messaging,mongo_cps,rl"}},
		{"rl", nil},
		{"RL", []string{"edge_proxy_per_ip,example4,messaging,mongo_cps,rl"}}, // domains are case-sensitive, as in Envoy
	}
	for i, tc := range cases {
		var md metadata.MD
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: tc.domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("foo", "a")}}, grpc.Trailer(&md))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("step %d: overall %v, want OK", i, resp.OverallCode)
		}
		got := md.Get(UnknownDomainTrailer)
		if fmt.Sprint(got) != fmt.Sprint(tc.trailer) || (got == nil) != (tc.trailer == nil) {
			t.Fatalf("step %d (%q): trailer %q, want %q", i, tc.domain, got, tc.trailer)
		}
	}
}

// TestUnknownDomainOverJSON: POST /json has no gRPC stream; an unknown
// domain answers as before.
func TestUnknownDomainOverJSON(t *testing.T) {
	hs := httptest.NewServer(JSONHandler(newTestServer(t, Options{}), 1<<20))
	defer hs.Close()
	r, err := http.Post(hs.URL, "application/json", strings.NewReader(`{"domain":"nope","descriptors":[{"entries":[{"key":"foo","value":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
}

// TestUnknownDomainTrailerValue: names are escaped, sorted, at most
// MaxListedDomains of them and then "*"; the value of one rule set is
// built once.
func TestUnknownDomainTrailerValue(t *testing.T) {
	ruleSet := func(domains ...string) *config.RuleSet {
		t.Helper()
		var files []*config.File
		for i, d := range domains {
			f, err := config.ParseRules(fmt.Sprintf("r%d.yaml", i),
				[]byte(fmt.Sprintf("domain: %q\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", d)))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		rs, err := config.Compile(files)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	many := make([]string, MaxListedDomains+1)
	for i := range many {
		many[i] = fmt.Sprintf("d%03d", i)
	}
	cases := []struct {
		rs   *config.RuleSet
		want string
	}{
		{ruleSet("shop", "api"), "api,shop"},
		{ruleSet("a,b c", "x+y"), url.QueryEscape("a,b c") + "," + url.QueryEscape("x+y")},
		{ruleSet(many...), strings.Join(many[:MaxListedDomains], ",") + ",*"},
		{ruleSet(many[:MaxListedDomains]...), strings.Join(many[:MaxListedDomains], ",")},
	}
	var u unknownDomains
	for i, c := range cases {
		md := u.trailer(c.rs)
		if got := md.Get(UnknownDomainTrailer); len(got) != 1 || got[0] != c.want {
			t.Fatalf("step %d: got %q, want %q", i, got, c.want)
		}
		if again := u.trailer(c.rs); fmt.Sprintf("%p", again) != fmt.Sprintf("%p", md) {
			t.Fatalf("step %d: the trailer of one rule set was built twice", i)
		}
	}
}
