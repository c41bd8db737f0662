package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
	"github.com/velvetrope/velvetrope/middleware"
)

// fixedClock is a clock that stands still, so the answers below do not
// depend on when the example runs.
type fixedClock int64

func (c fixedClock) Now() int64 { return int64(c) }

type userKey struct{}

// userOf is what an authentication middleware provides: the user it put
// in the request's context.
func userOf(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}

// A handler limited to two requests a minute per user and route, decided
// in process by the exact engine (package local; a *checker.Checker, or
// middleware.NewRemote of a velvetrope service, plugs in the same way).
// A request without a user is not limited by that descriptor.
func ExampleLimiter_Handler() {
	f, err := config.ParseRules("web.yaml", []byte(`domain: web
descriptors:
  - key: user_id
    descriptors:
      - key: route
        algorithm: fixed_window
        rate_limit: {unit: minute, requests_per_unit: 2}
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
	engine, err := local.New(config.NewStore(rs), k, clock, 0)
	if err != nil {
		panic(err)
	}
	lim, err := middleware.New(engine, middleware.Options{Domain: "web",
		Descriptors: [][]middleware.Source{{middleware.User(userOf), middleware.Route(nil)}}})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /export/{id}", lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "exported", r.PathValue("id"))
	})))

	for i, user := range []string{"priya", "priya", "priya", ""} {
		r := httptest.NewRequest("GET", fmt.Sprintf("/export/%d", i), nil)
		if user != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Print(r.URL.Path, ": ", w.Code)
		for _, h := range []string{"RateLimit", "Retry-After"} {
			if v := w.Header().Get(h); v != "" {
				fmt.Printf(", %s: %s", h, v)
			}
		}
		fmt.Println()
	}
	// Output:
	// /export/0: 200, RateLimit: "web:user_id/route";r=1;t=60
	// /export/1: 200, RateLimit: "web:user_id/route";r=0;t=60
	// /export/2: 429, RateLimit: "web:user_id/route";r=0;t=60, Retry-After: 60
	// /export/3: 200
}
