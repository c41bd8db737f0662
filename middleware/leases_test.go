package middleware

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const leaseRules = `domain: jobs
descriptors:
  - key: tenant
    concurrency: {max_in_flight: 1, lease_ttl: 30s}
`

// leaseEngines are an async checker in process (leases released by id)
// and the same served over gRPC (released by descriptors).
func leaseEngines(t *testing.T) map[string]ratelimit.Checker {
	mk := func() *checker.Checker {
		ms := counters.NewMemStore()
		bus, err := events.NewMemBus(1, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		c, err := checker.New(checker.Config{}, testrules.Store(t, leaseRules), ms, bus, testrules.NewClock())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return map[string]ratelimit.Checker{"in-process": mk(), "remote": remoteOf(t, mk())}
}

// TestConcurrencyMiddleware: a tenant's second request while its first is
// in the handler is refused (429); once the handler returned — also by a
// panic — the lease is back and the next request passes.
func TestConcurrencyMiddleware(t *testing.T) {
	for name, c := range leaseEngines(t) {
		t.Run(name, func(t *testing.T) {
			inside, leave := make(chan struct{}), make(chan struct{})
			l, err := New(c, Options{Domain: "jobs", Logger: quiet, Descriptors: [][]Source{{Header("X-Tenant", "tenant")}}})
			if err != nil {
				t.Fatal(err)
			}
			h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/slow":
					inside <- struct{}{}
					<-leave
				case "/panic":
					panic(http.ErrAbortHandler)
				}
			}))
			do := func(path string) int {
				rec := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodPost, path, nil)
				r.Header.Set("X-Tenant", "acme")
				func() {
					defer func() { _ = recover() }()
					h.ServeHTTP(rec, r)
				}()
				return rec.Code
			}
			var wg sync.WaitGroup
			var slow int
			wg.Add(1)
			go func() { defer wg.Done(); slow = do("/slow") }()
			<-inside
			if got := do("/fast"); got != http.StatusTooManyRequests {
				t.Fatalf("a second request in flight: %d, want 429", got)
			}
			close(leave)
			wg.Wait()
			if slow != http.StatusOK {
				t.Fatalf("the first: %d", slow)
			}
			if got := do("/fast"); got != http.StatusOK {
				t.Fatalf("after the first returned: %d", got)
			}
			do("/panic")
			if got := do("/fast"); got != http.StatusOK {
				t.Fatalf("after a handler panicked: %d", got)
			}
			if n := l.ReleaseFailures.Load(); n != 0 {
				t.Fatalf("%d releases failed", n)
			}
		})
	}
}
