package deferred

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/counters"
)

// TestFailedDeliveryNamesNoAddress: issue 19, item 10. A ticket's reason
// quoted net/http's error, with the target's URL, host and port, to
// anyone holding the ticket. Each kind of failure, made for real against
// local servers, is named without them.
func TestFailedDeliveryNamesNoAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	l.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	}))
	defer hangup.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer tlsSrv.Close()
	get := func(u string) error {
		timeout := 10 * time.Second // generous: a loaded machine must not turn a TLS failure into a timeout
		if u == slow.URL+"/internal/x" {
			timeout = 100 * time.Millisecond
		}
		resp, err := (&http.Client{Timeout: timeout}).Get(u)
		if err == nil {
			resp.Body.Close()
			return errors.New("no error")
		}
		return err
	}
	dnsErr := &url.Error{Op: "Post", URL: "http://orders.internal:8080/base/x", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "orders.internal", IsNotFound: true}}}
	cases := []struct {
		name, want string
		err        error
		leaks      []string
	}{
		{"connection refused", "connection refused", get("http://" + closedAddr + "/internal/x"), []string{closedAddr}},
		{"timeout", "did not answer in time", get(slow.URL + "/internal/x"), []string{slow.URL}},
		{"hang-up", "closed the connection", get(hangup.URL + "/internal/x"), []string{hangup.URL}},
		{"TLS", "TLS handshake", get(tlsSrv.URL + "/internal/x"), []string{tlsSrv.URL}},
		{"DNS", "did not resolve", dnsErr, []string{"orders.internal", "8080"}},
		{"other", "could not be reached", &url.Error{Op: "Post", URL: "http://10.9.8.7:1/x", Err: errors.New("boom at 10.9.8.7:1")}, []string{"10.9.8.7"}},
	}
	for i, c := range cases {
		got := failedDelivery(c.err)
		if !strings.Contains(got, c.want) {
			t.Errorf("step %d (%s): %q from %v, want it to say %q", i, c.name, got, c.err, c.want)
		}
		for _, leak := range append(c.leaks, "http", "127.0.0.1", "/internal", "tcp", "dial") {
			if strings.Contains(got, leak) {
				t.Errorf("step %d (%s): %q shows %q", i, c.name, got, leak)
			}
		}
	}
}

// TestTicketReasonNamesNoAddress: through the drain, a ticket whose
// deliveries were refused says so without the target's address; the
// dead-letter record keeps the full error for operators.
func TestTicketReasonNamesNoAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := newRig(t, "10m", 2)
	for range 10 {
		r.check(t, "alice", nil)
	}
	_, tk := r.check(t, "alice", &Payload{Path: "/secret"})
	d := r.drain(t, func(c *DrainConfig) {
		c.Client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr) // orders.test:8080 is nothing listening
		}}}
		c.BackoffMin, c.BackoffMax = time.Millisecond, 2*time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = d.Run(ctx) }()
	var st counters.Ticket
	deadline := time.Now().Add(20 * time.Second)
	for st.State != counters.TicketFailed {
		if time.Now().After(deadline) {
			t.Fatalf("ticket %+v, want failed", st)
		}
		time.Sleep(20 * time.Millisecond)
		st, _, _ = r.tickets.GetTicket(context.Background(), tk)
	}
	for _, leak := range []string{"orders.test", "8080", addr, "/base", "/secret", "http"} {
		if strings.Contains(st.Reason, leak) {
			t.Fatalf("ticket reason %q shows %q", st.Reason, leak)
		}
	}
	if want := "attempts: 2 attempts; the last: delivery failed: connection refused"; st.Reason != want {
		t.Fatalf("ticket reason %q, want %q", st.Reason, want)
	}
	cancel()
	dls := r.deadLetters(t)
	if len(dls) != 1 || !strings.Contains(dls[0].Detail, "orders.test:8080/base/secret") {
		t.Fatalf("dead letters %+v, want the full error kept for operators", dls)
	}
}
