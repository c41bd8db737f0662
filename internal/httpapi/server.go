package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/httpjson"
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
	// bodyBytes is what request bodies hold (LimitInFlight's budget).
	bodyBytes atomic.Int64
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

// LimitInFlight caps the work the listener holds at once; call it before
// Start. Two bounds, so that neither a flood of bodies nor a few slow
// clients can take the listener:
//
//   - Bodies are received against a budget of budget bytes shared by
//     every request (each holds what has arrived of its body, up to
//     maxBody): a request whose next bytes do not fit is answered 503.
//     A client that sends a body slowly holds only what it has sent, so
//     slow clients cannot shut others out unless they actually send the
//     budget (and http.read_timeout closes them).
//   - Once its body has arrived, a request takes one of n slots for its
//     decision; one beyond them is answered 503.
//
// Either 503 carries Retry-After: 1 and a JSON error, and an HTTP/1
// connection closes. /healthz, /readyz and /metrics are neither counted
// nor refused: an operator's probes and scrapes must answer when the
// listener is full, and they take no body. A body declared larger than
// maxBody goes to the handler unread (it answers 413). The handler reads
// the body from memory.
func (s *Server) LimitInFlight(n int, maxBody, budget int64) {
	next := s.srv.Handler
	busyCount := errorBody("server busy: " + strconv.Itoa(n) + " requests in flight (http.max_in_flight); retry later")
	busyBytes := errorBody("server busy: " + strconv.FormatInt(budget, 10) + " bytes of bodies being received (http.max_body_bytes_in_flight); retry later")
	refuse := func(w http.ResponseWriter, r *http.Request, body []byte) {
		s.busy.Add(1)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Retry-After", "1")
		if r.ProtoMajor == 1 { // HTTP/2 resets the stream; there, close would end the whole connection
			h.Set("Connection", "close")
		}
		// The rest of the body is not waited for: the server would
		// otherwise read up to 256 KiB of it before closing.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(body)
	}
	s.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == "/healthz" || p == "/readyz" || p == "/metrics" {
			next.ServeHTTP(w, r)
			return
		}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength <= maxBody {
			body, held, ok := s.receive(r.Body, maxBody, budget)
			defer s.bodyBytes.Add(-held)
			if !ok {
				refuse(w, r, busyBytes)
				return
			}
			r.Body = body
		}
		if s.inFlight.Add(1) > int64(n) {
			s.inFlight.Add(-1)
			refuse(w, r, busyCount)
			return
		}
		defer s.inFlight.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// errorBody is what writeError writes for msg, encoded once: a full
// listener answers without encoding anything.
func errorBody(msg string) []byte {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(httpjson.ErrorResponse{Error: msg})
	return b.Bytes()
}

// receive reads body into memory, holding its bytes against the shared
// budget as they arrive (a buffer's growth is held before it is made). It
// stops one byte past maxBody, leaving the handler to refuse the size. ok
// is false when the budget cannot hold the next bytes; held is what the
// caller gives back when the request is done.
func (s *Server) receive(body io.Reader, maxBody, budget int64) (out io.ReadCloser, held int64, ok bool) {
	buf := make([]byte, 0, 512)
	held = int64(cap(buf))
	if s.bodyBytes.Add(held) > budget {
		return nil, held, false
	}
	var err error
	for err == nil && int64(len(buf)) <= maxBody {
		if len(buf) == cap(buf) {
			// Doubling, exactly (no slack of append's growth), up to one
			// byte past the bound: what is held is what is allocated.
			next := min(2*cap(buf), int(maxBody)+1)
			grow := int64(next - cap(buf))
			if s.bodyBytes.Add(grow) > budget {
				return nil, held + grow, false
			}
			held += grow
			nb := make([]byte, len(buf), next)
			copy(nb, buf)
			buf = nb
		}
		var k int
		k, err = body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
	}
	if err != nil && err != io.EOF {
		return io.NopCloser(io.MultiReader(bytes.NewReader(buf), errReader{err})), held, true
	}
	return io.NopCloser(bytes.NewReader(buf)), held, true
}

// errReader hands the handler the error the body's reading ended with (a
// client gone, a read timeout, the body bound), after the bytes received.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// BodyBytes is the memory held by request bodies being received or served.
func (s *Server) BodyBytes() int64 { return s.bodyBytes.Load() }

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
		return fmt.Errorf("http: %w", err) // listen tcp ADDR: ...
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
