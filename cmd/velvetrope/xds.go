package main

import (
	"log/slog"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/metrics"
	"github.com/velvetrope/velvetrope/internal/tlsconf"
	"github.com/velvetrope/velvetrope/rulesync"
	"github.com/velvetrope/velvetrope/xdsrules"
)

// xdsRules is the process's xDS client; nil without CONFIG_TYPE=GRPC_XDS_SOTW.
type xdsRules struct{ c *xdsrules.Client }

// newXDS follows the configured control plane (started with the clients;
// its rules arrive with its first update, which /readyz waits for).
func newXDS(sd *shutdown, app config.App, src *rulesync.Sources, logger *slog.Logger, reg *metrics.Registry) (*xdsRules, error) {
	if !app.XDS.XDSOn() {
		return &xdsRules{}, nil
	}
	tlsCfg, err := tlsconf.Client(app.XDS.TLS, "xds.tls")
	if err != nil {
		return nil, staged("xds", err)
	}
	c, err := xdsrules.New(src, xdsrules.Options{ServerURL: app.XDS.ServerURL, NodeID: app.XDS.NodeID, TLS: tlsCfg, Logger: logger})
	if err != nil {
		return nil, staged("xds", err)
	}
	sd.hook(stopClients, "xds", c.Start, c.Stop)
	reg.Counter("velvetrope_xds_updates_accepted_total", "xDS updates of rate limit configurations made live here.", func() float64 {
		a, _ := c.Counts()
		return float64(a)
	})
	reg.Counter("velvetrope_xds_updates_refused_total", "xDS updates refused here (NACKed with the reason; the rules before them stayed).", func() float64 {
		_, r := c.Counts()
		return float64(r)
	})
	return &xdsRules{c: c}, nil
}

// ready says why the control plane's rules are not live yet (nil without one).
func (x *xdsRules) ready() error {
	if x.c == nil {
		return nil
	}
	return x.c.Ready()
}
