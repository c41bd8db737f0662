package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"time"

	"github.com/velvetrope/velvetrope/client"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
	"github.com/velvetrope/velvetrope/rls"
)

// fixedClock is a clock that stands still, so the answers below do not
// depend on when the examples run.
type fixedClock int64

func (c fixedClock) Now() int64 { return int64(c) }

// engine is velvetrope's exact in-process engine over one rule, three
// hits a minute per user, on a fixed clock: what the servers below decide
// with.
func engine() *local.Engine {
	f, err := config.ParseRules("api.yaml", []byte(`domain: api
descriptors:
  - key: user_id
    rate_limit: {unit: minute, requests_per_unit: 3}
`))
	if err != nil {
		panic(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		panic(err)
	}
	clock := fixedClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	k, err := limiter.NewKeyed(limiter.WithClock(clock))
	if err != nil {
		panic(err)
	}
	e, err := local.New(config.NewStore(rs), k, clock, time.Minute)
	if err != nil {
		panic(err)
	}
	return e
}

var priya = client.Request{Domain: "api",
	Descriptors: []client.Descriptor{{Entries: []client.Entry{{Key: "user_id", Value: "priya"}}}}}

// The HTTP API (POST /v1/check) of a velvetrope served in this process.
func ExampleNewHTTP() {
	srv := httptest.NewServer(httpapi.CheckHandler(engine(), 1<<20, nil, nil))
	defer srv.Close()

	c := client.NewHTTP(srv.URL, nil, time.Second)
	for range 4 {
		resp, err := c.Check(context.Background(), priya)
		if err != nil {
			panic(err) // a timeout or an unreachable service: the caller's failure policy decides
		}
		fmt.Println("over limit:", resp.OverLimit, "|", resp.Statuses[0])
	}
	// Output:
	// over limit: false | allow limit=3/minute remaining=2 reset=1m0s
	// over limit: false | allow limit=3/minute remaining=1 reset=1m0s
	// over limit: false | allow limit=3/minute remaining=0 reset=1m0s
	// over limit: true | deny limit=3/minute remaining=0 reset=1m0s
}

// Envoy's rate limit API (gRPC) of a velvetrope served in this process.
func ExampleDialGRPC() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv, _ := rls.NewGRPCServer(rls.New(engine(), rls.Options{}))
	go srv.Serve(lis)
	defer srv.Stop()

	c, err := client.DialGRPC(lis.Addr().String(), time.Second)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	resp, err := c.Check(context.Background(), priya)
	if err != nil {
		panic(err)
	}
	fmt.Println("over limit:", resp.OverLimit, "|", resp.Statuses[0])
	resp, _ = c.Check(context.Background(), client.Request{Domain: "shop", Descriptors: priya.Descriptors})
	fmt.Println("unknown domain:", resp.UnknownDomain, resp.KnownDomains)
	// Output:
	// over limit: false | allow limit=3/minute remaining=2 reset=1m0s
	// unknown domain: true [api]
}

// The CLI form of a descriptor.
func ExampleParseDescriptor() {
	d, err := client.ParseDescriptor("user_id=priya,route=/export/{id}")
	fmt.Println(d.Entries, err)
	d, _ = client.ParseDescriptor(`tags=a\,b`) // as the analytics name a value holding ','
	fmt.Println(d.Entries)
	_, err = client.ParseDescriptor("user_id")
	fmt.Println(err)
	// Output:
	// [{user_id priya} {route /export/{id}}] <nil>
	// [{tags a,b}]
	// descriptor "user_id": entry 1 ("user_id") has no '=': want k=v (a backslash escapes ',' and '=')
}

// A reset, exact to the nanosecond, rounded for people.
func ExampleRound() {
	for _, d := range []time.Duration{557123 * time.Microsecond, 12345 * time.Millisecond, 48*time.Minute + 36600*time.Millisecond} {
		fmt.Println(client.Round(d))
	}
	// Output:
	// 557ms
	// 12.3s
	// 48m37s
}
