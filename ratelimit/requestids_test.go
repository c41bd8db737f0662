package ratelimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
)

// TestConcurrentRetriesDecidedOnce: many concurrent copies of one request
// with one id are decided once; the others get that answer (the probe
// counted a charge three times in about one run in 25). A decision that
// fails gives the id back: the next copy decides.
func TestConcurrentRetriesDecidedOnce(t *testing.T) {
	ids := NewRequestIDs(time.Minute, 1024)
	req := &Request{Domain: "api", RequestID: "r-1", Hits: 3,
		Descriptors: []Descriptor{{Entries: []config.Entry{{Key: "k", Value: "v"}}}}}
	var decided atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var d Decision
			fp, done, err := ids.Replay(req, 1, &d)
			if err != nil {
				t.Error(err)
				return
			}
			if !done {
				decided.Add(1)
				time.Sleep(2 * time.Millisecond) // the decision takes a while: the others arrive meanwhile
				d = Decision{Code: OK, Statuses: []Status{{Code: OK, Remaining: 7}}}
				ids.Remember(req, fp, 1, &d)
				return
			}
			if d.Statuses[0].Remaining != 7 {
				t.Errorf("a copy answered %+v", d)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := decided.Load(); n != 1 {
		t.Fatalf("decided %d times, want once", n)
	}
	// a failed decision gives the id back
	other := *req
	other.RequestID = "r-2"
	var d Decision
	fp, done, _ := ids.Replay(&other, 1, &d)
	if done {
		t.Fatal("a fresh id answered")
	}
	ids.Abandon(&other, fp)
	if _, done, err := ids.Replay(&other, 1, &d); done || err != nil {
		t.Fatalf("after Abandon: done %v, %v", done, err)
	}
}
