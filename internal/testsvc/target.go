package testsvc

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// Target is an HTTP target for deferred deliveries: it answers Status
// (0: 204) and records each request's Idempotency-Key and arrival time.
type Target struct {
	Status int

	mu   sync.Mutex
	keys []string
	at   []time.Time
}

// ServeHTTP records the request.
func (t *Target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	t.mu.Lock()
	t.keys, t.at = append(t.keys, r.Header.Get("Idempotency-Key")), append(t.at, time.Now())
	status := t.Status
	t.mu.Unlock()
	if status == 0 {
		status = http.StatusNoContent
	}
	w.WriteHeader(status)
}

// Arrivals returns the keys and times of every request so far, in order.
func (t *Target) Arrivals() ([]string, []time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.keys...), append([]time.Time(nil), t.at...)
}

// Distinct returns how many distinct keys arrived.
func (t *Target) Distinct() int {
	keys, _ := t.Arrivals()
	seen := map[string]bool{}
	for _, k := range keys {
		seen[k] = true
	}
	return len(seen)
}
