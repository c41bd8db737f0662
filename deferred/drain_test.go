package deferred

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
	"github.com/velvetrope/velvetrope/ratelimit"
)

const shopRules = `
domain: shop
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 10}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: "http://orders.test:8080/base/", max_age: %s, max_attempts: %d}
`

// arrival is one delivery the fake target saw.
type arrival struct {
	at     time.Time
	key    string // Idempotency-Key
	method string
	url    string
	body   string
	ctype  string
}

// target is an in-memory HTTP target: answer decides each delivery's
// status from the count of arrivals with the same idempotency key.
type target struct {
	mu       sync.Mutex
	arrivals []arrival
	answer   func(n int) int
}

func (t *target) RoundTrip(r *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(r.Body)
	t.mu.Lock()
	a := arrival{at: time.Now(), key: r.Header.Get("Idempotency-Key"), method: r.Method, url: r.URL.String(),
		body: string(b), ctype: r.Header.Get("Content-Type")}
	n := 0
	for _, x := range t.arrivals {
		if x.key == a.key {
			n++
		}
	}
	t.arrivals = append(t.arrivals, a)
	t.mu.Unlock()
	status := http.StatusOK
	if t.answer != nil {
		status = t.answer(n)
	}
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
}

func (t *target) list() []arrival {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]arrival(nil), t.arrivals...)
}

// rig is a checker, a queue and a drain over in-memory buses.
type rig struct {
	rules   *config.Store
	engine  *local.Engine
	tickets *counters.MemStore
	topic   *events.MemBus
	dlq     *events.MemBus
	queue   *Queue
	target  *target
}

func newRig(t testing.TB, maxAge string, attempts int) *rig {
	t.Helper()
	return newRigRules(t, fmt.Sprintf(shopRules, maxAge, attempts))
}

// newRigRules is a rig over rules of domain shop, deferring on key user_id.
func newRigRules(t testing.TB, rules string) *rig {
	t.Helper()
	f, err := config.ParseRules("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(rs)
	k, err := limiter.NewKeyed(limiter.WithClock(limiter.SystemClock{}))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := local.New(store, k, limiter.SystemClock{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	topic, _ := events.NewMemBus(4, 10000)
	dlq, _ := events.NewMemBus(1, 10000)
	ms := counters.NewMemStore()
	ms.SetClock(limiter.SystemClock{})
	return &rig{rules: store, engine: eng, tickets: ms, topic: topic, dlq: dlq,
		queue: NewQueue(topic, ms, nil, time.Hour), target: &target{}}
}

func (r *rig) drain(t *testing.T, mod func(*DrainConfig)) *Drain {
	t.Helper()
	cfg := DrainConfig{Consumer: r.topic, DeadLetters: r.dlq, Checker: r.engine, Rules: r.rules.Load, Tickets: r.tickets,
		Client: &http.Client{Transport: r.target}, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}
	if mod != nil {
		mod(&cfg)
	}
	d, err := NewDrain(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// check decides one request for user and, when deferred, queues it with
// payload; it returns the decision code and the ticket.
func (r *rig) check(t *testing.T, user string, p *Payload) (ratelimit.Code, string) {
	t.Helper()
	req := ratelimit.Request{Domain: "shop", Hits: 1, Descriptors: []ratelimit.Descriptor{{Entries: []config.Entry{{Key: "user_id", Value: user}}}}}
	var d ratelimit.Decision
	if err := r.engine.Check(context.Background(), &req, &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != ratelimit.Deferred {
		return d.Code, ""
	}
	rc, err := r.queue.Enqueue(context.Background(), &req, &d, p)
	if err != nil {
		t.Fatal(err)
	}
	return d.Code, rc.Ticket
}

// deadLetters reads every dead letter so far.
func (r *rig) deadLetters(t *testing.T) []DeadLetter {
	t.Helper()
	var out []DeadLetter
	for r.dlq.Pending() > 0 {
		m, err := r.dlq.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var dl DeadLetter
		if err := json.Unmarshal(m.Value, &dl); err != nil {
			t.Fatal(err)
		}
		out = append(out, dl)
		_ = r.dlq.Commit(context.Background(), m)
	}
	return out
}

// TestDrainReleasesAtTheLimit: 35 requests at once for one key of a 10/s
// rule: 10 allowed, 25 deferred; the drain releases them in order, at
// most 10 per aligned second (the live 10 included), each delivered once
// under its ticket, with its payload; every ticket says delivered and the
// topic is committed to its end.
func TestDrainReleasesAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "10m", 5)
		// start on a second's boundary plus a little, like a real front
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
		start := time.Now()
		var tickets []string
		allowed := 0
		for i := range 35 {
			code, tk := r.check(t, "alice", &Payload{Method: "PUT", Path: fmt.Sprintf("/orders/%d?x=1", i),
				Headers: map[string]string{"Content-Type": "application/json"}, Body: fmt.Sprintf(`{"n":%d}`, i)})
			switch code {
			case ratelimit.OK:
				allowed++
			case ratelimit.Deferred:
				tickets = append(tickets, tk)
			default:
				t.Fatalf("request %d: %v", i, code)
			}
		}
		if allowed != 10 || len(tickets) != 25 {
			t.Fatalf("allowed %d, deferred %d; want 10 and 25", allowed, len(tickets))
		}
		d := r.drain(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- d.Run(ctx) }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("run: %v", err)
		}
		got := r.target.list()
		if len(got) != 25 {
			t.Fatalf("%d deliveries, want 25", len(got))
		}
		perSecond := map[int64]int{start.Unix(): allowed}
		for i, a := range got {
			if a.key != tickets[i] {
				t.Fatalf("delivery %d carries %q, want ticket %q (in order)", i, a.key, tickets[i])
			}
			want := fmt.Sprintf("http://orders.test:8080/base/orders/%d?x=1", i+10)
			if a.method != "PUT" || a.url != want || a.body != fmt.Sprintf(`{"n":%d}`, i+10) || a.ctype != "application/json" {
				t.Fatalf("delivery %d: %+v, want PUT %s", i, a, want)
			}
			perSecond[a.at.Unix()]++
		}
		for s, n := range perSecond {
			if n > 10 {
				t.Fatalf("second %d got %d (limit 10): %v", s-start.Unix(), n, perSecond)
			}
		}
		if last := got[len(got)-1].at.Sub(start); last < 2*time.Second {
			t.Fatalf("25 deferred at 10/s finished after %v, want >= 2 s", last)
		}
		for _, tk := range tickets {
			st, ok, err := r.tickets.GetTicket(context.Background(), tk)
			if err != nil || !ok || st.State != counters.TicketDelivered || st.Attempts != 1 || st.DeliveredAt == 0 {
				t.Fatalf("ticket %s: %+v %v %v", tk, st, ok, err)
			}
		}
		if n := r.topic.Pending(); n != 0 {
			t.Fatalf("%d records left uncommitted", n)
		}
		if d.Releases.Load() != 25 || d.Deliveries.Load() != 25 || d.Waits.Load() == 0 {
			t.Fatalf("releases %d deliveries %d waits %d", d.Releases.Load(), d.Deliveries.Load(), d.Waits.Load())
		}
		// the releases were charged: the window after the last release is full
		if code, _ := r.check(t, "bob", nil); code != ratelimit.OK {
			t.Fatalf("another key: %v", code)
		}
	})
}

// TestDrainRetries: a target that fails 3 times (503, 429, 500) and then
// answers 200 gets the item on the 4th attempt, with waits growing from
// the backoff minimum; the ticket counts the attempts.
func TestDrainRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "10m", 5)
		codes := []int{503, 429, 500}
		r.target.answer = func(n int) int {
			if n < len(codes) {
				return codes[n]
			}
			return 200
		}
		for range 10 {
			r.check(t, "alice", nil)
		}
		_, tk := r.check(t, "alice", nil)
		d := r.drain(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = d.Run(ctx) }()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		cancel()
		got := r.target.list()
		if len(got) != 4 {
			t.Fatalf("%d attempts, want 4", len(got))
		}
		for i := 1; i < len(got); i++ {
			gap := got[i].at.Sub(got[i-1].at)
			lo := (100 * time.Millisecond << (i - 1)) / 2
			if gap < lo || gap > 2*lo {
				t.Fatalf("wait before attempt %d: %v, want %v to %v", i+1, gap, lo, 2*lo)
			}
		}
		// without a payload the target gets a small document naming the ticket
		var doc struct{ Ticket, Domain, Rule string }
		if err := json.Unmarshal([]byte(got[0].body), &doc); err != nil || doc.Ticket != tk || doc.Domain != "shop" ||
			doc.Rule == "" || got[0].method != "POST" || got[0].ctype != "application/json" {
			t.Fatalf("document %q (%v)", got[0].body, err)
		}
		st, _, _ := r.tickets.GetTicket(context.Background(), tk)
		if st.State != counters.TicketDelivered || st.Attempts != 4 {
			t.Fatalf("ticket: %+v", st)
		}
		if d.Retries.Load() != 3 || d.Releases.Load() != 1 {
			t.Fatalf("retries %d releases %d (a retry must not charge again)", d.Retries.Load(), d.Releases.Load())
		}
	})
}

// TestDrainDeadLetters: each way an item fails for good ends in the
// dead-letter topic with its reason, the ticket says why, and the items
// behind it go on.
func TestDrainDeadLetters(t *testing.T) {
	cases := []struct {
		name     string
		maxAge   string
		attempts int
		answer   func(n int) int
		setup    func(r *rig) // after enqueueing, before the drain
		reason   string
		state    string
		tries    int // target arrivals for the failing item
	}{
		{name: "always 503", maxAge: "10m", attempts: 3, answer: func(int) int { return 503 },
			reason: ReasonAttempts, state: counters.TicketFailed, tries: 3},
		{name: "400", maxAge: "10m", attempts: 5, answer: func(int) int { return 400 },
			reason: ReasonRejected, state: counters.TicketFailed, tries: 1},
		{name: "redirect", maxAge: "10m", attempts: 5, answer: func(int) int { return 302 },
			reason: ReasonRejected, state: counters.TicketFailed, tries: 1},
		{name: "past max_age", maxAge: "1s", attempts: 5,
			setup:  func(*rig) { time.Sleep(2 * time.Second) },
			reason: ReasonExpired, state: counters.TicketExpired},
		{name: "rule gone", maxAge: "10m", attempts: 5,
			setup: func(r *rig) {
				f, _ := config.ParseRules("rules.yaml", []byte("domain: shop\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: second, requests_per_unit: 10}\n"))
				rs, _ := config.Compile([]*config.File{f})
				r.rules.Swap(rs)
			},
			reason: ReasonRule, state: counters.TicketFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, tc.maxAge, tc.attempts)
				for range 10 {
					r.check(t, "alice", nil)
				}
				_, bad := r.check(t, "alice", nil)
				if tc.setup != nil {
					tc.setup(r)
				}
				d := r.drain(t, nil)
				r.target.answer = tc.answer
				ctx, cancel := context.WithCancel(context.Background())
				go func() { _ = d.Run(ctx) }()
				time.Sleep(20 * time.Second)
				synctest.Wait()
				cancel()
				dls := r.deadLetters(t)
				if len(dls) != 1 || dls[0].Reason != tc.reason || dls[0].Item == nil || dls[0].Item.Ticket != bad || dls[0].Detail == "" {
					t.Fatalf("dead letters %+v, want one %s for %s", dls, tc.reason, bad)
				}
				if n := len(r.target.list()); n != tc.tries {
					t.Fatalf("%d arrivals, want %d", n, tc.tries)
				}
				st, _, _ := r.tickets.GetTicket(context.Background(), bad)
				if st.State != tc.state || !strings.HasPrefix(st.Reason, tc.reason) {
					t.Fatalf("ticket %+v, want %s", st, tc.state)
				}
				if d.DeadLetters()[tc.reason] != 1 || r.topic.Pending() != 0 {
					t.Fatalf("dead letters %v, pending %d", d.DeadLetters(), r.topic.Pending())
				}
			})
		})
	}
}

// TestDrainSetsMalformedAside: records that are not items go to the dead
// letters as they came (reason malformed) and the good item behind them
// on the same partition is delivered.
func TestDrainSetsMalformedAside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "10m", 5)
		bad := [][]byte{[]byte("garbage"), []byte(`{"v":2}`), []byte(`{"v":1,"ticket":"x"}`), []byte(`{}` + "\n{}")}
		for _, b := range bad {
			if err := r.topic.Publish(context.Background(), []events.Message{{Key: []byte("shop:user_id|user_id=alice"), Value: b}}); err != nil {
				t.Fatal(err)
			}
		}
		for range 10 {
			r.check(t, "alice", nil)
		}
		_, good := r.check(t, "alice", nil)
		d := r.drain(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = d.Run(ctx) }()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		cancel()
		dls := r.deadLetters(t)
		if len(dls) != len(bad) {
			t.Fatalf("%d dead letters, want %d", len(dls), len(bad))
		}
		for _, dl := range dls {
			if dl.Reason != ReasonMalformed || dl.Raw == nil || dl.Item != nil {
				t.Fatalf("dead letter %+v", dl)
			}
		}
		if got := r.target.list(); len(got) != 1 || got[0].key != good {
			t.Fatalf("deliveries %+v, want the good item", got)
		}
		if r.topic.Pending() != 0 {
			t.Fatalf("pending %d", r.topic.Pending())
		}
	})
}

// TestDrainCrashReleasesAgain: a drain stopped mid-way leaves what it had
// not finished uncommitted; the next one (after the group hands the
// partitions over: Rewind) delivers the rest. Nothing is lost; a repeat
// only ever carries a ticket already seen, and finished tickets are not
// delivered again.
func TestDrainCrashReleasesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "10m", 5)
		var tickets []string
		for range 40 {
			if _, tk := r.check(t, "alice", nil); tk != "" {
				tickets = append(tickets, tk)
			}
		}
		first := r.drain(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = first.Run(ctx); close(done) }()
		time.Sleep(1500 * time.Millisecond)
		cancel()
		<-done
		mid := len(r.target.list())
		if mid == 0 || mid >= len(tickets) {
			t.Fatalf("%d of %d delivered before the stop; want some", mid, len(tickets))
		}
		r.topic.Rewind()
		second := r.drain(t, nil)
		ctx, cancel = context.WithCancel(context.Background())
		go func() { _ = second.Run(ctx) }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		cancel()
		seen := map[string]int{}
		for _, a := range r.target.list() {
			seen[a.key]++
		}
		for _, tk := range tickets {
			if seen[tk] != 1 {
				t.Fatalf("ticket %s delivered %d times", tk, seen[tk])
			}
		}
		if len(seen) != len(tickets) || r.topic.Pending() != 0 {
			t.Fatalf("seen %d tickets of %d; %d records uncommitted", len(seen), len(tickets), r.topic.Pending())
		}
	})
}

// TestWindowLeft: a fixed window's release waits for the next window when
// what is left of this one is shorter than twice the usual delivery (and
// 5 ms), so that its delivery arrives in the window that was charged.
func TestWindowLeft(t *testing.T) {
	r := newRig(t, "10m", 5)
	rule := r.rules.Load().RuleByID("shop:user_id")
	d := r.drain(t, nil)
	at := func(ms int) time.Time { return time.Unix(1_700_000_000, int64(ms)*int64(time.Millisecond)) }
	cases := []struct {
		latency time.Duration
		now     int // ms into the second
		want    time.Duration
	}{
		{0, 0, 0},
		{0, 996, 4 * time.Millisecond}, // within the 5 ms floor
		{0, 990, 0},
		{100 * time.Millisecond, 700, 0},
		{100 * time.Millisecond, 800, 200 * time.Millisecond},
		{100 * time.Millisecond, 999, time.Millisecond},
		{400 * time.Millisecond, 100, 0}, // a guard over half the window is no guard: deliveries that slow cannot be aligned
	}
	for _, tc := range cases {
		d.latency.Store(int64(tc.latency))
		if got := d.windowLeft(rule, at(tc.now)); got != tc.want {
			t.Errorf("latency %v at %d ms: %v, want %v", tc.latency, tc.now, got, tc.want)
		}
	}
	d.latency.Store(0)
	for range 40 {
		d.learnLatency(80 * time.Millisecond)
	}
	if l := time.Duration(d.latency.Load()); l < 79*time.Millisecond || l > 80*time.Millisecond {
		t.Fatalf("moving average %v after 40 deliveries of 80 ms", l)
	}
}
