package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

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
	// example is the request the hints send, as JSON without hits: one a
	// rule of the loaded files limits (exampleRequest).
	example string
}

// builtinExample is the hints' request over the built-in rules (and the
// README's).
const builtinExample = `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}]}`

// exampleRequest is a request some rule of rs limits, for the banner's
// hints to work as printed over any rule files: the built-in example when
// its rule is loaded, else the first limited rule's path (by id) with a
// value for each key-only entry and each wildcard, checked by matching it.
// "" when no rule limits anything.
func exampleRequest(rs *config.RuleSet) string {
	if r := rs.Match("api", []config.Entry{{Key: "user_id", Value: "priya"}}); r != nil && r.ID == "api:user_id" {
		return builtinExample
	}
	rules := slices.Clone(rs.Rules())
	slices.SortFunc(rules, func(a, b *config.Rule) int { return strings.Compare(a.ID, b.ID) })
	for _, r := range rules {
		if r.Unlimited || r.Limit == 0 || len(r.Path) == 0 {
			continue
		}
		es := make([]config.Entry, len(r.Path))
		for i, e := range r.Path {
			es[i] = e
			switch {
			case e.Value == "":
				es[i].Value = "example"
			case strings.Contains(e.Value, "*"):
				es[i].Value = strings.ReplaceAll(e.Value, "*", "x")
			}
		}
		if rs.Match(r.Domain, es) != r {
			continue
		}
		q := struct {
			Domain      string `json:"domain"`
			Descriptors []struct {
				Entries []config.Entry `json:"entries"`
			} `json:"descriptors"`
		}{Domain: r.Domain}
		q.Descriptors = append(q.Descriptors, struct {
			Entries []config.Entry `json:"entries"`
		}{es})
		if j, err := json.Marshal(q); err == nil {
			return string(j)
		}
	}
	return ""
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
	fmt.Fprintf(w, "velvetrope dev: in-memory backends\n  HTTP  http://%s  (POST /v1/check, POST /v1/charge, POST /v1/release, GET /v1/leases, POST /json, /v1/deferred/{ticket}, /v1/rules, /v1/keys, /v1/controls, /v1/pools, /v1/analytics/..., /metrics, /healthz, /readyz)\n", shown)
	fmt.Fprintf(w, "  dashboard  http://%s/\n", shown)
	if grpcAddr != "" {
		refl := "server reflection on"
		if !b.reflection {
			refl = "server reflection off: grpc.reflection"
		}
		fmt.Fprintf(w, "  gRPC  %s  (envoy.service.ratelimit.v3.RateLimitService, velvetrope.v1.Charges, RLQS; %s)\n", grpcShown, refl)
	}
	if b.generated {
		fmt.Fprintf(w, "  admin token  %s  (generated for this run: set admin.token or VELVETROPE_ADMIN_TOKEN to choose one)\n", b.bearer)
	} else {
		fmt.Fprintln(w, "  admin token  yours (admin.token, VELVETROPE_ADMIN_TOKEN)")
	}
	ex := b.example
	if ex == "" {
		ex = builtinExample
	}
	// (the JSON goes inside single quotes: a value's own quote closes them)
	ex = strings.ReplaceAll(ex, "'", `'\''`)
	fmt.Fprintf(w, `try:
  curl -s -X POST http://%s/v1/check -d '%s'
  curl -s -H "Authorization: Bearer %s" http://%s/v1/controls
`, shown, strings.TrimSuffix(ex, "}")+`,"hits":1}`, b.bearer, shown)
	if grpcAddr != "" {
		if b.reflection {
			fmt.Fprintf(w, `  grpcurl -plaintext -d '%s' %s envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
`, ex, grpcShown)
		}
		fmt.Fprintf(w, `  curl -s -X POST http://%s/json -d '%s'
`, shown, ex)
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
