package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/reflection"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/decisions"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/tlsconf"
	"github.com/velvetrope/velvetrope/rlqs"
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

// rlsIn is what the Envoy rate limit service is built from.
type rlsIn struct {
	fx.In
	SD        *shutdown
	App       config.App
	Checker   *checker.Checker
	Decisions *decisions.Counter
	Logger    *slog.Logger
	Metrics   *metrics.Registry
}

// newRLS builds the Envoy rate limit service over the checker and, unless
// grpc.addr is empty, its gRPC listener, with server reflection unless
// grpc.reflection is false. It stops with the listeners (stopListeners):
// no call is in flight when the checker makes its final flush.
func newRLS(in rlsIn) (*rls.Server, *grpcListener, error) {
	sd, app, logger := in.SD, in.App, in.Logger
	s := rls.New(in.Checker, rls.Options{ResponseHeaders: app.GRPC.ResponseHeaders, Logger: logger,
		Bounds: app.Limits, Decisions: in.Decisions, MaxConcurrentStreams: uint32(app.GRPC.MaxConcurrentStreams),
		CallTimeout: app.GRPC.CallTimeout})
	s.RegisterMetrics(in.Metrics)
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
	quota := rlqs.New(in.Checker, rlqs.Options{Bounds: app.Limits, Logger: logger}) // Envoy's rate limit quota service, on the same port
	quota.Register(gl.srv)
	quota.RegisterMetrics(in.Metrics)
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
	srv.RegisterMetrics(reg)
	sd.hook(stopListeners, "http", srv.Start, srv.Stop)
	return srv, nil
}
