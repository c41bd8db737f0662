package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/velvetrope/velvetrope/config"
)

// servePprof serves Go's profiles on debug.pprof_addr, when set: a
// listener of its own, never the public one (a profile shows what the
// process holds).
func servePprof(sd *shutdown, app config.App, logger *slog.Logger) error {
	if app.Debug.PprofAddr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	sd.hook(stopListeners, "pprof", func(context.Context) error {
		lis, err := net.Listen("tcp", app.Debug.PprofAddr)
		if err != nil {
			return err // listen tcp ADDR: ...
		}
		logger.Info("profiles served", "addr", lis.Addr().String())
		go func() {
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Warn("profile listener stopped", "error", err)
			}
		}()
		return nil
	}, srv.Shutdown)
	return nil
}
