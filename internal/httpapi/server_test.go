package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLimitInFlight: with n requests being decided, one more (its body
// arrived) is answered 503 with Retry-After and a JSON error, and its
// connection closes; clients that send their bodies slowly take no slot
// (the probe of issue 19: 256 of them shut every client out for as long
// as they stalled), and a request is still decided beside them; probes
// and /metrics still answer; once the held requests finish, the listener
// serves again and holds no body bytes.
func TestLimitInFlight(t *testing.T) {
	const n = 2
	entered, release := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/fast", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	Health(mux, nil)
	s := NewServer("127.0.0.1:0", mux, 5*time.Second, 5*time.Second)
	s.LimitInFlight(n, 1<<20, 64<<20)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	base := "http://" + s.Addr()

	// slow clients: bodies declared and never finished hold no slot
	for range 4 * n {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	}
	resp, err := http.Post(base+"/fast", "text/plain", strings.NewReader("x"))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a request beside %d slow bodies: %v %v, want it decided", 4*n, resp, err)
	}
	resp.Body.Close()

	held := make(chan error, n)
	for range n {
		go func() {
			resp, err := http.Post(base+"/slow", "text/plain", strings.NewReader("x"))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			held <- err
		}()
		<-entered
	}
	if got := s.InFlight(); got != n {
		t.Fatalf("in flight: %d, want %d", got, n)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the request beyond the cap: %v (want 503)", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !resp.Close ||
		resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(body), `"error":"server busy: 2 requests in flight`) {
		t.Fatalf("beyond the cap: %d %v close=%v %s", resp.StatusCode, resp.Header, resp.Close, body)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection stayed open after the 503")
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s with the listener full: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	if s.Busy() != 1 {
		t.Fatalf("busy: %d, want 1", s.Busy())
	}
	close(release)
	for range n {
		if err := <-held; err != nil {
			t.Fatalf("a held request: %v", err)
		}
	}
	if got := s.InFlight(); got != 0 {
		t.Fatalf("in flight after: %d", got)
	}
	go func() { <-entered }() // the next /slow enters and is released at once
	resp, err = http.Post(base+"/slow", "text/plain", strings.NewReader("x"))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("after the held requests: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestBodyBytesInFlight: bodies are received against the shared budget:
// a body whose bytes do not fit beside what others hold is answered 503
// at once, naming the budget; what a request held is given back when it
// is done.
func TestBodyBytesInFlight(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/x", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	const budget = 8 << 10
	s := NewServer("127.0.0.1:0", mux, 5*time.Second, 5*time.Second)
	s.LimitInFlight(16, 6<<10, budget)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	send := func(declared, sent int) net.Conn {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", declared, strings.Repeat("a", sent))
		return c
	}
	a := send(6<<10, 5<<10) // holds 5 KiB and more, and stalls
	defer a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.BodyBytes() < 5<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("body bytes held %d, want at least 5 KiB", s.BodyBytes())
		}
		time.Sleep(time.Millisecond) // the server reading the first body
	}
	b := send(6<<10, 5<<10)
	defer b.Close()
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(b), nil)
	if err != nil {
		t.Fatalf("a body beyond the budget: %v (want 503)", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "bytes of bodies being received (http.max_body_bytes_in_flight)") {
		t.Fatalf("beyond the budget: %d %s", resp.StatusCode, body)
	}
	fmt.Fprint(a, strings.Repeat("a", 1<<10)) // the first body completes
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(a), nil); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the first body once complete: %v %v", resp, err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.BodyBytes() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("body bytes held after every request: %d, want 0", s.BodyBytes())
		}
		time.Sleep(time.Millisecond)
	}
}
