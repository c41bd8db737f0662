package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/rls"
)

const rules = `domain: api
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: free
    rate_limit: {unlimited: true}
`

// serve starts one exact checker behind both APIs and returns a client of
// each.
func serve(t *testing.T) (*GRPC, *HTTP) {
	t.Helper()
	l := testrules.Local(t, testrules.Store(t, rules), testrules.NewClock(), time.Minute)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := rls.NewGRPCServer(rls.New(l, rls.Options{}))
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	gc, err := DialGRPC(lis.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gc.Close() })
	mux := http.NewServeMux()
	mux.Handle("/v1/check", httpapi.CheckHandler(l, 1<<20, nil, nil))
	mux.Handle("/v1/charge", httpapi.ChargeHandler(l, 1<<20, nil))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return gc, NewHTTP(hs.URL, nil, 2*time.Second)
}

func one(kv ...string) Descriptor {
	var d Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, Entry{kv[i], kv[i+1]})
	}
	return d
}

// TestBothTransportsAgree sends the same sequence over gRPC and over HTTP
// (to separate counters, the values differ) and expects the same answers.
func TestBothTransportsAgree(t *testing.T) {
	g, h := serve(t)
	three := uint64(3)
	steps := []struct {
		descs []Descriptor
		hits  uint32
		want  string
	}{
		{[]Descriptor{one("ip", "X"), one("user", "X"), one("free", "x"), one("none", "x")}, 1,
			"allow | allow limit=3/minute remaining=2 reset=1m0s | allow limit=2/minute remaining=1 reset=1m0s | allow (unlimited) | allow (no limit)"},
		{[]Descriptor{one("user", "X")}, 1, "allow | allow limit=2/minute remaining=0 reset=1m0s"},
		{[]Descriptor{one("user", "X")}, 0, "deny | deny limit=2/minute remaining=0 reset=1m0s"},
		{[]Descriptor{{Entries: one("ip", "X").Entries, Hits: &three}}, 1, "deny | deny limit=3/minute remaining=0 reset=1m0s"},
	}
	for _, tr := range []struct {
		name string
		c    interface {
			Check(context.Context, Request) (Response, error)
		}
		value string
	}{{"grpc", g, "g"}, {"http", h, "h"}} {
		for i, s := range steps {
			req := Request{Domain: "api", Hits: s.hits}
			for _, d := range s.descs {
				d2 := Descriptor{Hits: d.Hits}
				for _, e := range d.Entries {
					d2.Entries = append(d2.Entries, Entry{e.Key, e.Value + tr.value})
				}
				req.Descriptors = append(req.Descriptors, d2)
			}
			resp, err := tr.c.Check(context.Background(), req)
			if err != nil {
				t.Fatalf("%s step %d: %v", tr.name, i, err)
			}
			got := map[bool]string{false: "allow", true: "deny"}[resp.OverLimit]
			for _, st := range resp.Statuses {
				st.Name = "" // gRPC only
				got += " | " + st.String()
			}
			if got != s.want {
				t.Fatalf("%s step %d:\n got  %s\n want %s", tr.name, i, got, s.want)
			}
		}
	}
}

func TestInvalidRequestsAreErrInvalidArgument(t *testing.T) {
	g, h := serve(t)
	for name, c := range map[string]interface {
		Check(context.Context, Request) (Response, error)
	}{"grpc": g, "http": h} {
		_, err := c.Check(context.Background(), Request{Domain: "api", Descriptors: []Descriptor{{}}})
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "descriptors[0].entries") {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

func TestUnreachableServiceTimesOut(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers HTTP/2
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	g, err := DialGRPC(lis.Addr().String(), 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_, err = g.Check(context.Background(), Request{Domain: "api", Descriptors: []Descriptor{one("ip", "1")}})
	if err == nil || errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("got %v, want a timeout error", err)
	}
}

func TestParseDescriptor(t *testing.T) {
	cases := []struct {
		in, want, err string
	}{
		{"user_id=priya", "user_id=priya", ""},
		{"tenant=acme,route=/export", "tenant=acme route=/export", ""},
		{"to_number=", "to_number=", ""},
		{"a=b=c", "a=b=c", ""},
		{"", "", "empty descriptor"},
		{"user_id", "", "has no '='"},
		{"=v", "", "empty key"},
		{"a=b,", "", "entry 2"},
		// the analytics' form: a backslash makes ',' '=' '\\' part of a name
		{`tb=a\,b\=c`, "tb=a,b=c", ""},
		{`k\=1=v\\,x=y`, `k=1=v\ x=y`, ""},
		{`path=C:\dir`, `path=C:\dir`, ""},
		{`a\`, "", "has no '='"},
		{`a=b\`, `a=b\`, ""},
	}
	for _, c := range cases {
		d, err := ParseDescriptor(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("%q: got %v, want an error containing %q", c.in, err, c.err)
			}
			continue
		}
		var parts []string
		for _, e := range d.Entries {
			parts = append(parts, e.Key+"="+e.Value)
		}
		if err != nil || strings.Join(parts, " ") != c.want {
			t.Fatalf("%q: got %v %v, want %s", c.in, parts, err, c.want)
		}
	}
}

func FuzzParseDescriptor(f *testing.F) {
	for _, s := range []string{"a=b", "a=b,c=d", "", "=", ",,", "a=\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDescriptor(s)
		if err != nil {
			return
		}
		if len(d.Entries) == 0 {
			t.Fatalf("%q: no entries and no error", s)
		}
		for _, e := range d.Entries {
			if e.Key == "" || strings.ContainsAny(e.Key, ",=") || strings.Contains(e.Value, ",") {
				t.Fatalf("%q: bad entry %+v", s, e)
			}
		}
	})
}

// TestParseDescriptorReadsTheAnalyticsForm: every descriptor the analytics
// name (config.AppendDescriptorText, which escapes '\\' ',' '=') parses
// back to exactly its entries, so `velvetrope check` and GET /v1/keys can
// ask about any key `top` lists (a value holding ',' was split in two).
func TestParseDescriptorReadsTheAnalyticsForm(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "n")
		part := rapid.StringOfN(rapid.SampledFrom([]rune{'a', 'b', ',', '=', '\\', ' ', 'é'}), 0, 6, -1)
		var es []config.Entry
		for i := range n {
			k := rapid.StringOfN(rapid.SampledFrom([]rune{'k', ',', '=', '\\'}), 1, 4, -1).Draw(t, fmt.Sprint("key", i))
			es = append(es, config.Entry{Key: k, Value: part.Draw(t, fmt.Sprint("value", i))})
		}
		text := string(config.AppendDescriptorText(nil, es))
		d, err := ParseDescriptor(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if len(d.Entries) != len(es) {
			t.Fatalf("%q: %d entries, want %d", text, len(d.Entries), len(es))
		}
		for i := range es {
			if d.Entries[i].Key != es[i].Key || d.Entries[i].Value != es[i].Value {
				t.Fatalf("%q: entry %d is %+v, want %+v", text, i, d.Entries[i], es[i])
			}
		}
	})
}
