package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"net"

	"github.com/velvetrope/velvetrope/config"
)

// devBanner is what dev's banner says besides its addresses.
type devBanner struct {
	// bearer is the admin example's token as the banner prints it: the
	// generated token itself, or a stand-in for the operator's own,
	// which is never echoed.
	bearer    string
	generated bool
	// reflection is grpc.reflection: the grpcurl hint needs it.
	reflection bool
}

// newDevBanner gives app an admin token when it has none: dev is for
// trying everything, the admin endpoints too, and they are off without
// one. 130 random bits (crypto/rand), printed in the banner and nowhere
// else; a restart makes a new one unless VELVETROPE_ADMIN_TOKEN keeps it.
func newDevBanner(app *config.App, getenv func(string) (string, bool)) devBanner {
	b := devBanner{reflection: app.GRPC.Reflection}
	switch v, ok := getenv("VELVETROPE_ADMIN_TOKEN"); {
	case app.Admin.Token == "":
		app.Admin.Token = rand.Text()
		b.bearer, b.generated = app.Admin.Token, true
	case ok && v == app.Admin.Token:
		b.bearer = "$VELVETROPE_ADMIN_TOKEN"
	default:
		b.bearer = "<admin.token>" // from the --config file
	}
	return b
}

func printBanner(w io.Writer, httpAddr, grpcAddr string, b devBanner) {
	shown, grpcShown := reachable(httpAddr), reachable(grpcAddr)
	fmt.Fprintf(w, "velvetrope dev: in-memory backends\n  HTTP  http://%s  (POST /v1/check, POST /json, /v1/deferred/{ticket}, /v1/rules, /v1/keys, /v1/controls, /v1/pools, /v1/analytics/..., /metrics, /healthz, /readyz)\n", shown)
	fmt.Fprintf(w, "  dashboard  http://%s/\n", shown)
	if grpcAddr != "" {
		refl := "server reflection on"
		if !b.reflection {
			refl = "server reflection off: grpc.reflection"
		}
		fmt.Fprintf(w, "  gRPC  %s  (envoy.service.ratelimit.v3.RateLimitService; %s)\n", grpcShown, refl)
	}
	if b.generated {
		fmt.Fprintf(w, "  admin token  %s  (generated for this run: set admin.token or VELVETROPE_ADMIN_TOKEN to choose one)\n", b.bearer)
	} else {
		fmt.Fprintln(w, "  admin token  yours (admin.token, VELVETROPE_ADMIN_TOKEN)")
	}
	fmt.Fprintf(w, `try:
  curl -s -X POST http://%s/v1/check -d '{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hits":1}'
  curl -s -H "Authorization: Bearer %s" http://%s/v1/controls
`, shown, b.bearer, shown)
	if grpcAddr != "" {
		if b.reflection {
			fmt.Fprintf(w, `  grpcurl -plaintext -d '{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}]}' %s envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
`, grpcShown)
		}
		fmt.Fprintf(w, `  curl -s -X POST http://%s/json -d '{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}]}'
`, shown)
	}
	if b.generated {
		fmt.Fprintf(w, "  export VELVETROPE_ADMIN_TOKEN=%s   # the docs' admin examples read it; a dev started with it keeps it\n", b.bearer)
	}
}

// reachable shows an unspecified host (":8080", "[::]:8080",
// "0.0.0.0:8080") as localhost, where a local client can reach it.
func reachable(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return net.JoinHostPort("localhost", port)
		}
	}
	return addr
}
