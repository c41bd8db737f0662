package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/rls"
)

// TestUnknownDomain: over gRPC an unknown domain is allowed with no
// limit, as Envoy answers, and the response says the domain is unknown
// and which are known; a known one says nothing of the kind. HTTP refuses
// the request.
func TestUnknownDomain(t *testing.T) {
	if unknownDomainTrailer != rls.UnknownDomainTrailer {
		t.Fatalf("the client reads %q, the server sends %q", unknownDomainTrailer, rls.UnknownDomainTrailer)
	}
	g, h := serve(t)
	for i, c := range []struct {
		domain  string
		unknown bool
		known   []string
	}{
		{"nope", true, []string{"api"}},
		{"api", false, nil},
	} {
		resp, err := g.Check(context.Background(), Request{Domain: c.domain, Descriptors: []Descriptor{one("ip", "1")}})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if resp.OverLimit || resp.UnknownDomain != c.unknown || !slices.Equal(resp.KnownDomains, c.known) {
			t.Fatalf("step %d (%q): got %+v, want unknown %v, known %q", i, c.domain, resp, c.unknown, c.known)
		}
	}
	if _, err := h.Check(context.Background(), Request{Domain: "nope", Descriptors: []Descriptor{one("ip", "1")}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("http: %v, want ErrInvalidArgument", err)
	}
}

func TestKnownDomainsParse(t *testing.T) {
	for i, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"api", []string{"api"}},
		{"api,shop", []string{"api", "shop"}},
		{"a%2Cb+c,x%2By", []string{"a,b c", "x+y"}},
		{"a,*", []string{"a", "*"}},
		{"a,%zz", []string{"a"}}, // not an escape: dropped
	} {
		if got := knownDomains(c.in); !slices.Equal(got, c.want) {
			t.Fatalf("step %d: knownDomains(%q) = %q, want %q", i, c.in, got, c.want)
		}
	}
}

func TestRound(t *testing.T) {
	for i, c := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{556923535 * time.Nanosecond, "557ms"},
		{600 * time.Millisecond, "600ms"},
		{999600 * time.Microsecond, "1s"},
		{1500 * time.Microsecond, "2ms"},
		{1234567 * time.Nanosecond, "1ms"},
		{499 * time.Nanosecond, "0s"},
		{1499 * time.Nanosecond, "1µs"},
		{12345 * time.Millisecond, "12.3s"},
		{48*time.Minute + 37*time.Second + 123456789, "48m37s"},
		{-556923535 * time.Nanosecond, "-557ms"},
		{time.Duration(1<<63 - 1), "2562047h47m16s"}, // the bounds: never wraps, never unrounded
		{time.Duration(-1 << 63), "-2562047h47m16s"},
	} {
		if got := Round(c.in).String(); got != c.want {
			t.Fatalf("step %d: Round(%v) = %s, want %s", i, c.in, got, c.want)
		}
	}
	s := Status{Limited: true, Limit: 50, Unit: "second", Remaining: 49, ResetAfter: 556923535 * time.Nanosecond}
	if got, want := s.String(), "allow limit=50/second remaining=49 reset=557ms"; got != want {
		t.Fatalf("Status.String() = %q, want %q", got, want)
	}
}
