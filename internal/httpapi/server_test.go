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

// TestLimitInFlight: with n requests in flight, one more is answered 503
// with Retry-After and a JSON error before its body is read, and its
// connection closes; probes and /metrics still answer; once the held
// requests finish, the listener serves again.
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
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	Health(mux, nil)
	s := NewServer("127.0.0.1:0", mux, 5*time.Second, 5*time.Second)
	s.LimitInFlight(n)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	base := "http://" + s.Addr()
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

	// one more, declaring a body it never sends: answered at once
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the request beyond the cap: %v (want 503 without its body)", err)
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
