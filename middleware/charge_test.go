package middleware

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const chargeRules = `domain: llm
descriptors:
  - key: tenant
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: login
    algorithm: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// chargeEngines are an in-process engine and a Remote over gRPC.
func chargeEngines(t *testing.T) map[string]ratelimit.Checker {
	return map[string]ratelimit.Checker{
		"in-process": testrules.Local(t, testrules.Store(t, chargeRules), testrules.NewClock(), 0),
		"remote":     remoteOf(t, testrules.Local(t, testrules.Store(t, chargeRules), testrules.NewClock(), 0)),
	}
}

func chargeHandler(t *testing.T, c ratelimit.Checker, opts Options, next http.HandlerFunc) (http.Handler, *Limiter) {
	t.Helper()
	opts.Domain, opts.Logger = "llm", quiet
	l, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l.Handler(next), l
}

// TestChargeAfterTokens: each response's tokens (a response header) are
// charged after it: a tenant whose responses cost 30 tokens gets 4
// requests of its 100 a minute (1 + 30 each: 31, 62, 93, 124), and the
// 5th is refused.
func TestChargeAfterTokens(t *testing.T) {
	for name, c := range chargeEngines(t) {
		t.Run(name, func(t *testing.T) {
			h, l := chargeHandler(t, c, Options{
				Descriptors: [][]Source{{Header("X-Tenant", "tenant")}},
				ChargeAfter: func(status int, h http.Header) int64 {
					n, _ := strconv.ParseInt(h.Get("X-Tokens"), 10, 64)
					return n
				},
			}, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Tokens", "30")
				_, _ = w.Write([]byte("completion"))
			})
			var got []int
			for range 5 {
				rec := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodPost, "/v1/chat", nil)
				r.Header.Set("X-Tenant", "acme")
				h.ServeHTTP(rec, r)
				got = append(got, rec.Code)
			}
			want := []int{200, 200, 200, 200, 429}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("codes %v, want %v", got, want)
				}
			}
			if n := l.ChargeFailures.Load(); n != 0 {
				t.Fatalf("%d charges failed", n)
			}
		})
	}
}

// TestChargeAfterOnlyFailures: a budget counted only by charges (Cost 0,
// 1 for a 401): 3 failed logins a minute, successful ones free; the
// 4th attempt after 3 failures is refused before the handler runs.
func TestChargeAfterOnlyFailures(t *testing.T) {
	for name, c := range chargeEngines(t) {
		t.Run(name, func(t *testing.T) {
			ran := 0
			h, _ := chargeHandler(t, c, Options{
				Descriptors: [][]Source{{Header("X-User", "login")}},
				Cost:        func(*http.Request) int64 { return 0 },
				ChargeAfter: func(status int, _ http.Header) int64 {
					if status == http.StatusUnauthorized {
						return 1
					}
					return 0
				},
			}, func(w http.ResponseWriter, r *http.Request) {
				ran++
				if r.Header.Get("X-Password") != "right" {
					w.WriteHeader(http.StatusUnauthorized)
				}
			})
			try := func(password string) int {
				rec := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodPost, "/login", nil)
				r.Header.Set("X-User", "priya")
				r.Header.Set("X-Password", password)
				h.ServeHTTP(rec, r)
				return rec.Code
			}
			var got []int
			for _, p := range []string{"right", "wrong", "right", "wrong", "wrong", "wrong", "right"} {
				got = append(got, try(p))
			}
			want := []int{200, 401, 200, 401, 401, 429, 429}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("codes %v, want %v", got, want)
				}
			}
			if ran != 5 {
				t.Fatalf("the handler ran %d times, want 5", ran)
			}
		})
	}
}
