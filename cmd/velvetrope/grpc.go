package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/reflection"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/decisions"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/tlsconf"
	"github.com/velvetrope/velvetrope/rls"
)

// grpcListener is the Envoy rate limit service listener of a process.
type grpcListener struct {
	srv *grpc.Server
	lis net.Listener
}

// Addr is the bound address ("" when the listener is disabled).
func (g *grpcListener) Addr() string {
	if g == nil || g.lis == nil {
		return ""
	}
	return g.lis.Addr().String()
}

// newRLS builds the Envoy rate limit service over c and, unless grpc.addr
// is empty, its gRPC listener, with server reflection unless
// grpc.reflection is false. It stops with the listeners (stopListeners):
// no call is in flight when the checker makes its final flush.
func newRLS(sd *shutdown, app config.App, c *checker.Checker, n *decisions.Counter,
	logger *slog.Logger) (*rls.Server, *grpcListener, error) {
	s := rls.New(c, rls.Options{ResponseHeaders: app.GRPC.ResponseHeaders, Logger: logger,
		Bounds: app.Limits, Decisions: n, MaxConcurrentStreams: uint32(app.GRPC.MaxConcurrentStreams),
		CallTimeout: app.GRPC.CallTimeout})
	gl := &grpcListener{}
	if app.GRPC.Addr == "" {
		return s, gl, nil
	}
	tlsCfg, err := tlsconf.Server(app.GRPC.TLS, "grpc.tls")
	if err != nil {
		return nil, nil, staged("grpc", err)
	}
	// the same bound on a message as on an HTTP body: a request above it is
	// refused by gRPC (ResourceExhausted) before it is decoded
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(int(app.HTTP.MaxBodyBytes))}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	gl.srv, _ = rls.NewGRPCServer(s, opts...)
	if app.GRPC.Reflection {
		// grpcurl and grpcui need nothing else installed; the service is
		// Envoy's public API, so this publishes no more than its name
		reflection.Register(gl.srv)
	}
	sd.hook(stopListeners, "grpc", func(context.Context) error {
		lis, err := net.Listen("tcp", app.GRPC.Addr)
		if err != nil {
			return err // listen tcp ADDR: ...
		}
		gl.lis = lis
		go func() {
			if err := gl.srv.Serve(lis); err != nil {
				logger.Error("gRPC listener stopped", "addr", lis.Addr().String(), "error", err)
			}
		}()
		return nil
	}, func(ctx context.Context) error {
		done := make(chan struct{})
		go func() { gl.srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			gl.srv.Stop() // drop what did not finish in time
		}
		return nil
	})
	return s, gl, nil
}

// newHTTPServer is a process's one HTTP listener, with TLS when
// http.tls says so, at most http.max_in_flight requests at once; its
// metrics go to reg.
func newHTTPServer(sd *shutdown, app config.App, mux http.Handler, writeTimeout time.Duration, reg *metrics.Registry) (*httpapi.Server, error) {
	tlsCfg, err := tlsconf.Server(app.HTTP.TLS, "http.tls")
	if err != nil {
		return nil, staged("http", err)
	}
	srv := httpapi.NewServer(app.HTTP.Addr, mux, app.HTTP.ReadTimeout, writeTimeout)
	srv.UseTLS(tlsCfg)
	srv.LimitInFlight(app.HTTP.MaxInFlight, app.HTTP.MaxBodyBytes, app.HTTP.MaxBodyBytesInFlight)
	reg.Gauge("velvetrope_http_in_flight", "HTTP requests being decided, their bodies received (at most http.max_in_flight; /healthz, /readyz and /metrics not counted).",
		func() float64 { return float64(srv.InFlight()) })
	reg.Gauge("velvetrope_http_body_bytes", "Memory of the HTTP request bodies being received or decided (at most http.max_body_bytes_in_flight).",
		func() float64 { return float64(srv.BodyBytes()) })
	reg.Counter("velvetrope_http_busy_total", "HTTP requests answered 503 because http.max_in_flight requests or http.max_body_bytes_in_flight bytes of bodies were in flight.",
		func() float64 { return float64(srv.Busy()) })
	sd.hook(stopListeners, "http", srv.Start, srv.Stop)
	return srv, nil
}
