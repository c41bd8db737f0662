package testsvc

import (
	"fmt"
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

// Deliveries is what a Target saw of a set of tickets.
type Deliveries struct {
	Delivered int           // distinct tickets that arrived
	Repeats   int           // arrivals of a ticket already seen
	PerSecond map[int64]int // arrivals per aligned second (unix), repeats included
	Last      time.Time     // the last arrival
}

// Check reports what arrived of tickets, and an error naming the first
// arrival whose idempotency key is not one of them, or the first aligned
// second with more than perSecond arrivals.
func (t *Target) Check(tickets []string, perSecond int) (Deliveries, error) {
	keys, at := t.Arrivals()
	want := make(map[string]bool, len(tickets))
	for _, tk := range tickets {
		want[tk] = true
	}
	d := Deliveries{PerSecond: map[int64]int{}}
	seen := map[string]bool{}
	for i, k := range keys {
		if !want[k] {
			return d, fmt.Errorf("delivery %d carries %q: not one of the tickets", i, k)
		}
		if seen[k] {
			d.Repeats++
		}
		seen[k] = true
		d.PerSecond[at[i].Unix()]++
		d.Last = at[i]
	}
	d.Delivered = len(seen)
	for s, n := range d.PerSecond {
		if n > perSecond {
			return d, fmt.Errorf("second %d got %d deliveries (limit %d, repeats included)", s, n, perSecond)
		}
	}
	return d, nil
}
