package rlqsclient

import (
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/rlqs"
)

const rules = `domain: envoy
descriptors:
  - key: tenant
    rlqs: {bucket_keys: [tenant]}
    algorithm: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 100}
`

func serve(t *testing.T) string {
	t.Helper()
	bus, err := events.NewMemBus(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	chk, err := checker.New(checker.Config{}, testrules.Store(t, rules), counters.NewMemStore(), bus, testrules.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlqs.New(chk, rlqs.Options{}).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// TestClientsShareTheBudget: three proxies of one bucket (100 an hour),
// each asking 60 times, uneven in time, admit between 90 and 100 between
// them: the grants never add up to more than the budget, and a proxy's
// unspent grant goes to the others as reports come.
func TestClientsShareTheBudget(t *testing.T) {
	addr := serve(t)
	b := map[string]string{"tenant": "acme"}
	var clients []*Client
	for range 3 {
		c, err := Dial(addr, Options{Domain: "envoy", Interval: 20 * time.Millisecond, DenyWithoutAssignment: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 60 {
				if c.Allow(b) {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
				time.Sleep(time.Duration(i+1) * 2 * time.Millisecond) // uneven demand (a proxy's pace, not a clock for the server)
			}
		}()
	}
	wg.Wait()
	for _, c := range clients {
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if admitted > 100 || admitted < 90 {
		t.Fatalf("admitted %d of a budget of 100 (demand 180)", admitted)
	}
	t.Logf("admitted %d of 100 (180 asked)", admitted)
}
