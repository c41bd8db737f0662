package adversarial

// Issue 19, items 4, 5, 7, 10 (the ticket's leak) and 12 (payload paths):
// the deferred queue attacked through the real binary.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/client"
	"github.com/velvetrope/velvetrope/internal/testsvc"
	"github.com/velvetrope/velvetrope/middleware"
)

// dqAnswer is the part of a /v1/check answer these tests read.
type dqAnswer struct {
	Decision   string `json:"decision"`
	Ticket     string `json:"ticket"`
	DeferError string `json:"defer_error"`
	Error      string `json:"error"`
	Field      string `json:"field"`
	Statuses   []struct {
		Decision string `json:"decision"`
		Rule     string `json:"rule"`
	} `json:"statuses"`
}

// dqCheck sends one /v1/check and decodes the answer.
func dqCheck(t *testing.T, p *proc, body string) (int, dqAnswer) {
	t.Helper()
	code, b := p.do(t, "POST", "/v1/check", body)
	var a dqAnswer
	if err := json.Unmarshal([]byte(b), &a); err != nil {
		t.Fatalf("/v1/check answered %d %q: %v", code, b, err)
	}
	return code, a
}

// dqBody is a /v1/check body of one descriptor key=value, with extra
// fields (`"request_id":"x"`, `"payload":{...}`) appended.
func dqBody(domain, key, value string, extra ...string) string {
	s := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]`, domain, key, value)
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

// dqTicket reads GET /v1/deferred/{ticket}.
func dqTicket(t *testing.T, p *proc, ticket string) (int, map[string]any) {
	t.Helper()
	code, b := p.do(t, "GET", "/v1/deferred/"+ticket, "")
	var m map[string]any
	_ = json.Unmarshal([]byte(b), &m)
	return code, m
}

// dqTarget is a deferred requests' target counting what arrives.
type dqTarget struct {
	srv  *httptest.Server
	n    atomic.Int64
	mu   sync.Mutex
	keys []string
	path []string
}

func newDQTarget(t *testing.T, status int) *dqTarget {
	tg := &dqTarget{}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.n.Add(1)
		tg.mu.Lock()
		tg.keys = append(tg.keys, r.Header.Get("Idempotency-Key"))
		tg.path = append(tg.path, r.URL.RawPath+"|"+r.URL.Path)
		tg.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

// Item 4: an elastic rule whose pool was spent answered defer with a
// ticket in a domain where no rule defers; the drain then failed the
// ticket (dead letter `rule`) and the work was lost. The whole matrix
// of throttle × pool state × on_exceed, through every surface: /v1/check
// (the one surface that queues), Envoy's /json and gRPC, the CLI and the
// Go middleware over a remote velvetrope. Only a request queued under a
// rule that defers it is answered defer; every other over-limit answer
// is a refusal, and no ticket is ever failed for want of a deferring rule.
func TestOverLimitDefersOnlyUnderADeferringRule(t *testing.T) {
	target := newDQTarget(t, http.StatusNoContent)
	rules := map[string]string{
		"shop.yaml": fmt.Sprintf(`domain: shop
descriptors:
  - key: hard_unset
    algorithm: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: hard_deny
    algorithm: fixed_window
    on_exceed: deny
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: hard_defer
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %[1]q}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: soft_deny
    algorithm: fixed_window
    throttle: {type: soft, overage_percent: 100}
    on_exceed: deny
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: soft_defer
    algorithm: token_bucket
    throttle: {type: soft, overage_percent: 100}
    on_exceed: defer
    defer: {target: %[1]q}
    rate_limit: {unit: hour, requests_per_unit: 1}
`, target.srv.URL),
		// no rule of this domain defers (the reproduction)
		"tenants.yaml": `domain: tenants
pools:
  - name: roomy
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - name: tiny
    rate_limit: {unit: hour, requests_per_unit: 1}
descriptors:
  - key: elastic_room
    algorithm: fixed_window
    throttle: {type: elastic, pool: roomy, max_multiplier: 2}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: elastic_spent
    algorithm: fixed_window
    throttle: {type: elastic, pool: tiny, max_multiplier: 2}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: elastic_spent_deny
    algorithm: sliding_window
    throttle: {type: elastic, pool: tiny, max_multiplier: 3}
    on_exceed: deny
    rate_limit: {unit: hour, requests_per_unit: 1}
`,
	}
	p := start(t, options{rules: rules})

	// The one combination the rule format refuses: elastic and defer.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(fmt.Sprintf(`domain: x
pools:
  - name: p
    rate_limit: {unit: hour, requests_per_unit: 1}
descriptors:
  - key: k
    algorithm: fixed_window
    throttle: {type: elastic, pool: p}
    on_exceed: defer
    defer: {target: %q}
    rate_limit: {unit: hour, requests_per_unit: 1}
`, target.srv.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "rules", "validate", bad).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "elastic throttling and on_exceed defer do not combine") {
		t.Fatalf("rules validate of elastic + defer: %v\n%s", err, out)
	}

	gc, err := client.DialGRPC(p.GRPC, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()

	cases := []struct {
		name, domain, key string
		// spend: values to drive first (each sent until its first refusal)
		spend []string
		// admitted: how many requests of the value under test pass first
		admitted int
		defers   bool
	}{
		{"hard, on_exceed unset", "shop", "hard_unset", nil, 1, false},
		{"hard, deny", "shop", "hard_deny", nil, 1, false},
		{"hard, defer", "shop", "hard_defer", nil, 1, true},
		{"soft, deny", "shop", "soft_deny", nil, 2, false},
		{"soft, defer", "shop", "soft_defer", nil, 2, true},
		{"elastic, pool with room (over its ceiling)", "tenants", "elastic_room", nil, 2, false},
		{"elastic, pool spent, on_exceed unset", "tenants", "elastic_spent", []string{"spender"}, 1, false},
		{"elastic, pool spent, deny", "tenants", "elastic_spent_deny", nil, 1, false},
	}
	queued := p.metric(t, "velvetrope_deferred_enqueued_total")
	var tickets []string
	for i, c := range cases {
		for _, v := range c.spend {
			for n := 0; ; n++ {
				if _, a := dqCheck(t, p, dqBody(c.domain, c.key, v)); a.Decision != "allow" {
					break
				}
				if n > 10 {
					t.Fatalf("case %d (%s): spending with %q never refused", i, c.name, v)
				}
			}
		}
		v := "victim"
		for n := range c.admitted {
			if code, a := dqCheck(t, p, dqBody(c.domain, c.key, v)); code != 200 || a.Decision != "allow" {
				t.Fatalf("case %d (%s): request %d: %d %+v, want allow", i, c.name, n, code, a)
			}
		}
		code, a := dqCheck(t, p, dqBody(c.domain, c.key, v))
		switch {
		case code != 200:
			t.Fatalf("case %d (%s): over the limit: %d %+v", i, c.name, code, a)
		case c.defers && (a.Decision != "defer" || len(a.Ticket) != 22 || a.Statuses[0].Decision != "defer"):
			t.Fatalf("case %d (%s): over a deferring rule: %+v, want defer with a ticket", i, c.name, a)
		case !c.defers && (a.Decision != "deny" || a.Ticket != "" || a.Statuses[0].Decision != "deny"):
			t.Fatalf("case %d (%s): over a rule that does not defer: %+v, want deny without a ticket", i, c.name, a)
		}
		if a.Ticket != "" {
			tickets = append(tickets, a.Ticket)
		}

		// Envoy's /json
		jb := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, c.domain, c.key, v)
		if code, body := p.do(t, "POST", "/json", jb); code != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
			t.Fatalf("case %d (%s): /json: %d %s, want 429 OVER_LIMIT", i, c.name, code, body)
		}
		// gRPC
		resp, err := gc.Check(context.Background(), client.Request{Domain: c.domain, Hits: 1,
			Descriptors: []client.Descriptor{{Entries: []client.Entry{{Key: c.key, Value: v}}}}})
		if err != nil || !resp.OverLimit {
			t.Fatalf("case %d (%s): gRPC: %+v %v, want OVER_LIMIT", i, c.name, resp, err)
		}
		// the CLI
		var stdout bytes.Buffer
		cli := exec.Command(bin, "check", "--addr", p.GRPC, "--domain", c.domain, "--descriptor", c.key+"="+v)
		cli.Stdout = &stdout
		err = cli.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.HasPrefix(stdout.String(), "deny") {
			t.Fatalf("case %d (%s): velvetrope check: %v\n%s, want deny and exit 2", i, c.name, err, stdout.String())
		}
		// the Go middleware over the remote velvetrope
		l, err := middleware.New(middleware.NewRemote(gc), middleware.Options{Domain: c.domain,
			Descriptors: [][]middleware.Source{{middleware.Header("X-V", c.key)}}})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
		r := httptest.NewRequest("POST", "/work", strings.NewReader("x"))
		r.Header.Set("X-V", v)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusTooManyRequests || ran {
			t.Fatalf("case %d (%s): middleware: %d (handler ran: %v), want 429", i, c.name, rec.Code, ran)
		}
	}

	if got := p.metric(t, "velvetrope_deferred_enqueued_total") - queued; got != float64(len(tickets)) {
		t.Fatalf("%v items enqueued, want %d: one per defer answered", got, len(tickets))
	}
	// Give the drain time to look at every item: none may fail for want
	// of a rule that defers it.
	time.Sleep(time.Second)
	for _, tk := range tickets {
		if code, m := dqTicket(t, p, tk); code != 200 || m["state"] != "queued" {
			t.Fatalf("ticket %s: %d %v, want queued (waiting for the next hour's budget)", tk, code, m)
		}
	}
	if n := p.metric(t, "velvetrope_drain_dead_letters_total", `reason="rule"`); n != 0 {
		t.Fatalf("%v dead letters for want of a deferring rule, want 0", n)
	}
}

// Item 5: the same request_id sent three times made three tickets and
// three deliveries under three Idempotency-Keys. A retried deferred
// request answers the first one's ticket and is queued once; the same id
// on another request is a conflict.
func TestRetriedDeferredRequestKeepsItsTicket(t *testing.T) {
	target := newDQTarget(t, http.StatusNoContent)
	p := start(t, options{rules: map[string]string{"shop.yaml": fmt.Sprintf(`domain: shop
descriptors:
  - key: user
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %q}
    rate_limit: {unit: second, requests_per_unit: 1}
`, target.srv.URL)}})
	// the budget of this second spent, whatever the second (the request
	// that finds it spent is deferred too: its ticket is not the retries')
	spent := ""
	for spent == "" {
		_, a := dqCheck(t, p, dqBody("shop", "user", "u"))
		spent = a.Ticket
	}
	body := dqBody("shop", "user", "u", `"request_id":"order-7"`, `"payload":{"path":"/orders/7","body":"pay"}`)
	var first string
	for i := range 3 {
		code, a := dqCheck(t, p, body)
		if code != 200 || a.Decision != "defer" || a.Ticket == "" {
			t.Fatalf("send %d: %d %+v, want defer with a ticket", i, code, a)
		}
		if i == 0 {
			first = a.Ticket
		} else if a.Ticket != first {
			t.Fatalf("send %d: ticket %s, want the first send's %s", i, a.Ticket, first)
		}
	}
	delivered := func() (mine, others int, keys []string) {
		target.mu.Lock()
		defer target.mu.Unlock()
		for _, k := range target.keys {
			switch k {
			case first:
				mine++
			case spent:
			default:
				others++
			}
		}
		return mine, others, append([]string(nil), target.keys...)
	}
	eventually(t, 10*time.Second, "the delivery", func() bool { mine, _, _ := delivered(); return mine >= 1 })
	// another request under the id: refused, not answered with the ticket
	other := dqBody("shop", "user", "someone-else", `"request_id":"order-7"`, `"payload":{"path":"/orders/7","body":"pay"}`)
	if code, a := dqCheck(t, p, other); code != http.StatusConflict || a.Field != "request_id" || a.Ticket != "" {
		t.Fatalf("the id on another request: %d %+v, want 409 naming request_id", code, a)
	}
	time.Sleep(3 * time.Second) // time for repeats to arrive, if any were queued (one a second)
	if mine, others, keys := delivered(); mine != 1 || others != 0 {
		t.Fatalf("deliveries with Idempotency-Keys %v, want one under %s (and %s's)", keys, first, spent)
	}
	if n := p.metric(t, "velvetrope_deferred_enqueued_total"); n != 2 {
		t.Fatalf("%v items enqueued, want 2 (the retried request's and the spender's)", n)
	}
	// a retry after the delivery still answers the same ticket, now delivered
	if _, a := dqCheck(t, p, body); a.Ticket != first {
		t.Fatalf("a retry after the delivery: %+v, want ticket %s", a, first)
	}
	if _, m := dqTicket(t, p, first); m["state"] != "delivered" {
		t.Fatalf("ticket %s: %v, want delivered", first, m)
	}
}

// dqFlood sends n deferred requests of a ~60 KB payload for the keys
// key(i), 16 at once, and returns the answers' decisions and defer
// errors. With warm, each key's budget is spent first by a request
// without a payload (not counted).
func dqFlood(t *testing.T, p *proc, n int, descKey string, warm bool, key func(i int) string) (decisions map[string]int, errs map[string]int) {
	t.Helper()
	payload := strings.Repeat("p", 60_000)
	decisions, errs = map[string]int{}, map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := atomic.Int64{}
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var failed atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if warm {
					resp, err := hc.Post("http://"+p.HTTP+"/v1/check", "application/json", strings.NewReader(dqBody("shop", descKey, key(i))))
					if err != nil {
						failed.Store(err.Error())
						return
					}
					resp.Body.Close()
				}
				body := dqBody("shop", descKey, key(i), `"payload":{"path":"/w","body":"`+payload+`"}`)
				resp, err := hc.Post("http://"+p.HTTP+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					failed.Store(err.Error())
					return
				}
				var a dqAnswer
				err = json.NewDecoder(resp.Body).Decode(&a)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					failed.Store(fmt.Sprintf("status %d: %v %+v", resp.StatusCode, err, a))
					return
				}
				mu.Lock()
				decisions[a.Decision]++
				if a.DeferError != "" {
					errs[a.DeferError]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatalf("the flood: %v", f)
	}
	return decisions, errs
}

// Item 7: 2 × 60,000 deferred 60 KB requests for one key took dev from
// 30 to 801 MB: nothing bounded deferred items per key or in all, and
// dev's dead letters (up to 65,536 items) were never consumed. Scaled
// down: 2 × 5,000 × 60 KB for one key, then 5,000 spread over keys whose
// items expire at once into the dead letters. Past `defer.max_queued` for
// a key and `deferred.max_bytes` in all a request is refused with the
// reason, counted; the peak resident set stays under 200 MB (the items
// alone would be 900 MB; before the fix dev peaked at 1,455 MB, after it
// at 146 MB).
func TestDeferredItemsAreBounded(t *testing.T) {
	target := newDQTarget(t, http.StatusNoContent)
	p := start(t, options{
		// 16 MiB of deferred items; a decision waits up to 5 s for the
		// store (make test runs every package at once on 2 cores: past the
		// default 150 ms the rule's open failure policy admits, and that
		// admission is not a refusal the counts below expect)
		config: "deferred:\n  max_bytes: 16777216\nchecker:\n  store_timeout: 5s\n",
		rules: map[string]string{"shop.yaml": fmt.Sprintf(`domain: shop
descriptors:
  - key: user
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %[1]q, max_queued: 50}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: burst
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %[1]q, max_age: 1s}
    rate_limit: {unit: hour, requests_per_unit: 1}
`, target.srv.URL)}})
	base := p.rssKB(t, "VmHWM")

	// one key: max_queued items, and then refusals; the hour's one
	// admission in either flood (two if the floods straddle the hour's end)
	allowed, deferred, hours := 0, 0, 1
	if time.Now().Truncate(time.Hour) != time.Now().Add(2*time.Minute).Truncate(time.Hour) {
		hours = 2
	}
	for i, want := range []int{50, 0} {
		dec, errs := dqFlood(t, p, 5000, "user", false, func(int) string { return "one" })
		allowed += dec["allow"]
		deferred += dec["defer"]
		if (i == 0 && dec["defer"] != want) || dec["allow"]+dec["defer"]+dec["deny"] != 5000 || allowed > hours || (i == 1 && allowed < 1) {
			t.Fatalf("one key, flood %d: decisions %v (%d admitted in all), want %d deferred (defer.max_queued 50), one admitted in both floods, the rest refused (store errors %v)",
				i, dec, allowed, want, p.metric(t, "velvetrope_checker_store_errors_total"))
		}
		for e := range errs {
			if !strings.Contains(e, "max_queued") {
				t.Fatalf("one key: refused with %q, want the reason (defer.max_queued)", e)
			}
		}
	}
	if n, want := p.metric(t, "velvetrope_deferred_refused_total", `reason="max_queued"`), float64(10000-deferred-allowed); n != want {
		t.Fatalf("velvetrope_deferred_refused_total{reason=max_queued} = %v, want the %v refusals", n, want)
	}
	// many keys: at most max_bytes queued at once; every 1 s item expires
	// into the dead letters
	dec, errs := dqFlood(t, p, 5000, "burst", true, func(i int) string { return fmt.Sprint("k", i) })
	if dec["defer"] >= 5000 || dec["deny"] == 0 || dec["allow"] > 0 {
		t.Fatalf("many keys: decisions %v, want refusals past deferred.max_bytes", dec)
	}
	for e := range errs {
		if !strings.Contains(e, "max_bytes") {
			t.Fatalf("many keys: refused with %q, want the reason (deferred.max_bytes)", e)
		}
	}
	if n := p.metric(t, "velvetrope_deferred_refused_total", `reason="max_bytes"`); n == 0 {
		t.Fatalf("velvetrope_deferred_refused_total{reason=max_bytes} = 0")
	}
	eventually(t, 30*time.Second, "the items expiring into the dead letters", func() bool {
		return p.metric(t, "velvetrope_drain_dead_letters_total", `reason="expired"`) >= float64(dec["defer"])
	})
	peak := p.rssKB(t, "VmHWM")
	t.Logf("VmHWM %d MB before, %d MB after; many keys: %v; dead letters dropped %v", base>>10, peak>>10, dec,
		p.metric(t, "velvetrope_dev_dead_letters_dropped_total"))
	if peak > 200<<10 {
		t.Fatalf("peak resident set %d MB, want under 200 MB", peak>>10)
	}
	// and the bound counts what is queued now: a fresh key defers again
	if _, a := dqCheck(t, p, dqBody("shop", "burst", "fresh")); a.Decision != "allow" {
		t.Fatalf("a fresh key: %+v", a)
	}
	if _, a := dqCheck(t, p, dqBody("shop", "burst", "fresh")); a.Decision != "defer" {
		t.Fatalf("a fresh key over its limit: %+v, want defer", a)
	}
}

// Item 10 (the ticket's part): GET /v1/deferred/{ticket} needs no token
// (tickets reach end users through Location), and its reason showed the
// internal target's URL. A ticket says what failed, never where.
func TestTicketStateHidesTheTarget(t *testing.T) {
	refusing := newDQTarget(t, http.StatusServiceUnavailable)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/internal/base"
	l.Close() // nothing listens there: connection refused
	p := start(t, options{
		config: "deferred:\n  backoff_min: 10ms\n  backoff_max: 20ms\n",
		rules: map[string]string{"shop.yaml": fmt.Sprintf(`domain: shop
descriptors:
  - key: busy
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %q, max_attempts: 2}
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: gone
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %q, max_attempts: 2}
    rate_limit: {unit: second, requests_per_unit: 1}
`, refusing.srv.URL+"/internal/base", closed)}})
	cases := []struct{ key, want string }{
		{"busy", "target answered 503"},
		{"gone", "connection refused"},
	}
	for _, c := range cases {
		var ticket string
		for ticket == "" {
			_, a := dqCheck(t, p, dqBody("shop", c.key, "u", `"payload":{"path":"/secret-path"}`))
			ticket = a.Ticket
		}
		var m map[string]any
		eventually(t, 15*time.Second, c.key+": the ticket failing", func() bool {
			_, m = dqTicket(t, p, ticket)
			return m["state"] == "failed"
		})
		reason, _ := m["reason"].(string)
		host, port, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(refusing.srv.URL, "http://"), "https://"))
		_, cport, _ := net.SplitHostPort(strings.TrimPrefix(closed, "http://")[:strings.Index(strings.TrimPrefix(closed, "http://"), "/")])
		for _, leak := range []string{"http:", "127.0.0.1", host, port, cport, "/internal", "/secret-path", "dial", "tcp"} {
			if strings.Contains(reason, leak) {
				t.Fatalf("%s: the ticket's reason %q shows %q", c.key, reason, leak)
			}
		}
		if !strings.Contains(reason, c.want) {
			t.Fatalf("%s: the ticket's reason %q, want it to say %q", c.key, reason, c.want)
		}
	}
}

// Item 12 (payload paths): `/../../admin` and `/%2e%2e/admin` were
// delivered as they were, escaping the target's base path on servers
// that normalise. Every path with a dot segment — raw, percent-encoded,
// double-encoded, behind an encoded slash or a backslash, or with a path
// parameter — is refused naming payload.path, and nothing reaches the
// target; ordinary paths (dots inside a segment, dots in the query) are
// still deferred.
func TestDeferredPayloadPathsStayUnderTheTarget(t *testing.T) {
	target := newDQTarget(t, http.StatusNoContent)
	p := start(t, options{rules: map[string]string{"shop.yaml": fmt.Sprintf(`domain: shop
descriptors:
  - key: user
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %q, max_queued: 100}
    rate_limit: {unit: hour, requests_per_unit: 1}
`, target.srv.URL+"/base")}})
	if _, a := dqCheck(t, p, dqBody("shop", "user", "u")); a.Decision != "allow" {
		t.Fatalf("first: %+v", a)
	}
	bad := []string{
		"/../../admin", "/%2e%2e/admin", "/%2E%2E/admin", "/.%2e/admin", "/%2e./admin", "/..", "/a/..", "/a/../../admin",
		"/./admin", "/a/./b", "/.", "/%2e", "/a/%2e/b", "/%2e%2e%2fadmin", "/a%2f..%2f..%2fadmin", "/a%2F%2E%2E%2Fadmin",
		"/a\\..\\admin", "/a%5c..%5cadmin", "/a%5C%2e%2e%5Cadmin", "/..\\admin", "/\\\\evil/x", "/%252e%252e/admin",
		"/a/%252e%252e%252fadmin", "/..;/admin", "/a/..;x=1/admin", "/%2e%2e;/admin", "/..?x=1", "/a/..%3f", "/a/..%23",
		"/..%00/admin", "/a/%00", "/%c0%ae%c0%ae/admin", "/\u2025/admin", "/a/%u002e%u002e/admin", "/a/%zz",
	}
	for _, path := range bad {
		payload, _ := json.Marshal(map[string]string{"path": path})
		code, a := dqCheck(t, p, dqBody("shop", "user", "u", `"payload":`+string(payload)))
		if code != http.StatusBadRequest || a.Field != "payload.path" {
			t.Errorf("path %q: %d %+v, want 400 naming payload.path", path, code, a)
		}
	}
	good := []string{"/orders/7", "/a.b/c..d/...x", "/v1/items?q=../x&r=%2e%2e", "/%7Euser/x", "/a%20b"}
	for _, path := range good {
		payload, _ := json.Marshal(map[string]string{"path": path})
		if code, a := dqCheck(t, p, dqBody("shop", "user", "u", `"payload":`+string(payload))); code != 200 || a.Decision != "defer" {
			t.Errorf("path %q: %d %+v, want defer", path, code, a)
		}
	}
	if n := target.n.Load(); n != 0 {
		t.Fatalf("the target saw %d requests before any release", n)
	}
}

// Items 5 and 7 across two checkers: the request ids and the count of
// queued items live in the counter store (Redis), so a retry that reaches
// the other checker answers the same ticket, and one key's
// defer.max_queued holds for both checkers together; an item past its
// deadline stops counting even when no drain finished it.
func TestDeferredAcrossCheckers(t *testing.T) {
	redisAddr, kafkaAddr := testsvc.Redis(t), testsvc.Kafka(t)
	target := newDQTarget(t, http.StatusNoContent)
	rules := map[string]string{"shop.yaml": fmt.Sprintf(`domain: shop
descriptors:
  - key: user
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %q, max_queued: 3, max_age: 3s}
    rate_limit: {unit: hour, requests_per_unit: 1}
`, target.srv.URL)}
	cfg := fmt.Sprintf("kafka: {topic: %s, deferred_topic: %s}\n", testsvc.Unique("deltas"), testsvc.Unique("dfr"))
	var ps []*proc
	for i := range 2 {
		ps = append(ps, start(t, options{kind: "checker", rules: rules, config: cfg, env: []string{
			"VELVETROPE_REDIS_ADDRS=" + redisAddr, "VELVETROPE_KAFKA_BROKERS=" + kafkaAddr,
			"VELVETROPE_INSTANCE_ID=" + testsvc.Unique(fmt.Sprint("chk", i)), "VELVETROPE_STATE_DIR=" + t.TempDir()}}))
	}
	user := testsvc.Unique("u")
	if _, a := dqCheck(t, ps[0], dqBody("shop", "user", user)); a.Decision != "allow" {
		t.Fatalf("first: %+v", a)
	}
	// ids are kept for the ticket's retention, in a Redis other runs share
	body := dqBody("shop", "user", user, `"request_id":"`+testsvc.Unique("order")+`"`, `"payload":{"path":"/o/1"}`)
	_, a0 := dqCheck(t, ps[0], body)
	_, a1 := dqCheck(t, ps[1], body)
	if a0.Decision != "defer" || a0.Ticket == "" || a1.Decision != "defer" || a1.Ticket != a0.Ticket {
		t.Fatalf("the request on checker 0: %+v; retried on checker 1: %+v; want one ticket", a0, a1)
	}
	if n := ps[1].metric(t, "velvetrope_deferred_enqueued_total"); n != 0 {
		t.Fatalf("checker 1 queued %v items for the retry, want 0", n)
	}
	// the key holds the retried request's item; two more, whichever
	// checker, then refusals
	var got []string
	for i := range 6 {
		_, a := dqCheck(t, ps[i%2], dqBody("shop", "user", user))
		got = append(got, a.Decision)
		if a.Decision == "deny" && !strings.Contains(a.DeferError, "max_queued is 3") {
			t.Fatalf("refusal %d: %+v, want the reason (defer.max_queued)", i, a)
		}
	}
	if strings.Join(got, " ") != "defer defer deny deny deny deny" {
		t.Fatalf("decisions %v over both checkers, want 2 more deferred (max_queued 3 in all) and then refusals", got)
	}
	// no drain runs: past their 3 s deadline the items stop counting
	eventually(t, 10*time.Second, "room after the deadline", func() bool {
		_, a := dqCheck(t, ps[1], dqBody("shop", "user", user))
		return a.Decision == "defer"
	})
}
