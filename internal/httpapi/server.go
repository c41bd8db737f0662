package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server is a process's one HTTP listener.
type Server struct {
	srv  *http.Server
	tls  bool
	ln   net.Listener
	addr string
	done chan error
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
