package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Server is a process's one HTTP listener.
type Server struct {
	srv  *http.Server
	tls  bool
	ln   net.Listener
	addr string
	done chan error
	// inFlight counts the requests being served (LimitInFlight); busy
	// the ones refused because the listener was full.
	inFlight, busy atomic.Int64
}

// NewServer returns a Server for addr serving h.
func NewServer(addr string, h http.Handler, readTimeout, writeTimeout time.Duration) *Server {
	return &Server{addr: addr, srv: &http.Server{Handler: h, ReadTimeout: readTimeout, WriteTimeout: writeTimeout,
		ReadHeaderTimeout: readTimeout, MaxHeaderBytes: 64 << 10}}
}

// UseTLS serves TLS (HTTP/2 and HTTP/1.1) with cfg; call before Start.
func (s *Server) UseTLS(cfg *tls.Config) {
	if cfg != nil {
		s.srv.TLSConfig, s.tls = cfg, true
	}
}

// LimitInFlight caps the requests the listener serves at once at n; call
// it before Start. A request beyond the cap is answered at once, before
// its body is read: 503 with Retry-After: 1 and a JSON error, and an
// HTTP/1 connection closes (Connection: close), so the server does not
// read the body either (HTTP/2 resets the stream). /healthz, /readyz and
// /metrics are neither counted nor refused: an operator's probes and
// scrapes must answer when the listener is full, which is when they are
// needed, and they take no body. What the listener holds of bodies is
// then at most n × the body bound.
func (s *Server) LimitInFlight(n int) {
	next := s.srv.Handler
	body := []byte(`{"error":"server busy: ` + strconv.Itoa(n) + ` requests in flight (http.max_in_flight); retry later"}` + "\n")
	s.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == "/healthz" || p == "/readyz" || p == "/metrics" {
			next.ServeHTTP(w, r)
			return
		}
		if s.inFlight.Add(1) > int64(n) {
			s.inFlight.Add(-1)
			s.busy.Add(1)
			h := w.Header()
			h.Set("Content-Type", "application/json")
			h.Set("Retry-After", "1")
			if r.ProtoMajor == 1 { // HTTP/2 resets the stream; there, close would end the whole connection
				h.Set("Connection", "close")
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(body)
			return
		}
		defer s.inFlight.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// InFlight is the number of requests being served (counted once
// LimitInFlight is set).
func (s *Server) InFlight() int64 { return s.inFlight.Load() }

// Busy is the number of requests refused because the listener was full.
func (s *Server) Busy() int64 { return s.busy.Load() }

// Start binds the listener, then serves in the background: when Start
// returns nil the address accepts connections.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", s.addr, err)
	}
	s.ln, s.done = ln, make(chan error, 1)
	go func() {
		var err error
		if s.tls {
			err = s.srv.ServeTLS(ln, "", "") // the certificates are in TLSConfig
		} else {
			err = s.srv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return nil
}

// Addr returns the bound address (useful with port 0).
func (s *Server) Addr() string {
	if s.ln == nil {
		return s.addr
	}
	return s.ln.Addr().String()
}

// Stop stops accepting, lets requests in flight finish within ctx, and
// waits for the serve loop.
func (s *Server) Stop(ctx context.Context) error {
	if s.ln == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; err == nil {
		err = serr
	}
	return err
}

// Health serves /healthz (alive) and /readyz (ready reports why not).
func Health(mux *http.ServeMux, ready func() error) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}
