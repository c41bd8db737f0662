package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// envVar is an environment variable the binary reads, and what it sets.
type envVar struct{ name, what string }

// envVars is every VELVETROPE_* variable the binary reads, in the order
// the top-level usage lists them (TestUsageListsEveryVariable holds this
// list to the code's own string literals). The processes read them
// through config.LoadApp; top reads the analytics token itself.
var envVars = []envVar{
	{"VELVETROPE_INSTANCE_ID", "instance_id: this process's name in events, metrics and Redis (default: the host name)"},
	{"VELVETROPE_RULES", "rules: rule files or directories, comma-separated (dev: the built-in example when unset)"},
	{"VELVETROPE_HTTP_ADDR", "http.addr: the HTTP listener (default :8080)"},
	{"VELVETROPE_GRPC_ADDR", "grpc.addr: the Envoy rate limit service listener (default :8081; empty: none)"},
	{"VELVETROPE_REDIS_ADDRS", "redis.addrs: Redis host:port, comma-separated (several: a cluster)"},
	{"VELVETROPE_REDIS_PASSWORD", "redis.password: Redis AUTH password"},
	{"VELVETROPE_KAFKA_BROKERS", "kafka.brokers: Kafka host:port, comma-separated"},
	{"VELVETROPE_KAFKA_SASL_PASSWORD", "kafka.sasl.password: the SASL password towards the brokers"},
	{"VELVETROPE_CLICKHOUSE_ADDR", "clickhouse.addr: ClickHouse (native protocol) for usage analytics (unset: none)"},
	{"VELVETROPE_CLICKHOUSE_PASSWORD", "clickhouse.password"},
	{"VELVETROPE_ADMIN_TOKEN", "admin.token: bearer token of the admin endpoints (unset: they answer 403; dev generates one)"},
	{"VELVETROPE_ADMIN_TOKENS", "admin.tokens: more admin tokens, each recorded by name as the author of its changes: NAME=TOKEN,..."},
	{"VELVETROPE_ANALYTICS_TOKEN", "analytics.token: bearer token of /v1/analytics/* (unset: open); top sends it"},
	{"VELVETROPE_HASH_KEY", "checker.hash_key: secret of hash_values rules, the same on every checker (unset: random)"},
	{"VELVETROPE_STATE_DIR", "checker.state_dir: the spill file's directory (default $STATE_DIRECTORY, else /var/lib/velvetrope, else ~/.local/state/velvetrope)"},
	{"VELVETROPE_PPROF_ADDR", "debug.pprof_addr: serve Go's profiles on this address (unset: none)"},
	{"VELVETROPE_RULES_STORE", "rules_store.backend: redis or memory, the rules store beside the rule files (unset: files only; dev: memory)"},
	{"CONFIG_TYPE", "xds.config_type: GRPC_XDS_SOTW takes rules from an xDS control plane too, as Envoy's ratelimit service (default FILE)"},
	{"CONFIG_GRPC_XDS_SERVER_URL", "xds.server_url: the control plane's host:port"},
	{"CONFIG_GRPC_XDS_NODE_ID", "xds.node_id: this process's node id for the control plane"},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "xds.tls.enabled: true for TLS to the control plane"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds.tls.cert_file: a client certificate for the control plane"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "xds.tls.key_file: its key"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds.tls.ca_file: the CA the control plane's certificate is checked against"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.tls.server_name: the name the control plane's certificate must hold"},
	{"VELVETROPE_RULES_STORE_REDIS_ADDRS", "rules_store.redis_addrs: a persistent Redis of the rules store's own, comma-separated (unset: redis.addrs)"},
}

// envText is the description of the variable name ("" when unknown).
func envText(name string) string {
	for _, e := range envVars {
		if e.name == name {
			return e.what
		}
	}
	return ""
}

// command is what a subcommand's --help says besides its flags, which
// come from its FlagSet: a flag is listed exactly when it is defined.
type command struct {
	name     string   // as typed: "check", "rules validate"
	synopsis string   // after the name
	summary  string   // what it does
	env      []string // the variables of envVars it reads
}

// help writes c's --help.
func (c command) help(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", strings.TrimSpace("velvetrope "+c.name+" "+c.synopsis), c.summary)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nFlags:")
		out := fs.Output()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
	if len(c.env) == 0 {
		fmt.Fprintln(w, "\nEnvironment: none read.")
		return
	}
	if fs.Lookup("config") != nil {
		fmt.Fprintln(w, "\nEnvironment (flags override it; it overrides the --config file):")
	} else {
		fmt.Fprintln(w, "\nEnvironment:")
	}
	writeEnv(w, c.env)
}

// writeEnv lists the variables names with what each sets, aligned.
func writeEnv(w io.Writer, names []string) {
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, envText(n))
	}
}

// parse parses args into fs for c: -h, -help or --help print c's help on
// stdout and return flag.ErrHelp; a bad flag is returned with a pointer
// to the help, for the caller to print (exit does) as its other errors.
func (c command) parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard) // the flag package's own message is the error
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.help(stdout, fs)
	case err != nil:
		return fmt.Errorf("%w (velvetrope %s --help lists its flags)", err, c.name)
	}
	return err
}

// exit is the exit code of a parse error: 0 after --help, else code,
// with the error on stderr.
func (c command) exit(err error, stderr io.Writer, code int) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "velvetrope %s: %v\n", c.name, err)
	return code
}

// process is a long-running subcommand: its command and the flags it
// takes besides --http and --config (processConfig defines them).
type process struct {
	command
	rules, grpc bool
}

// processes are dev, checker, aggregator and drain.
var processes = map[string]process{
	"dev": {command{"dev", "[flags]",
		"Serve the HTTP and Envoy gRPC APIs over the whole pipeline on in-memory backends, in one process.\n" +
			"Without admin.token it generates an admin token and prints it in the banner.",
		[]string{"VELVETROPE_INSTANCE_ID", "VELVETROPE_RULES", "VELVETROPE_HTTP_ADDR", "VELVETROPE_GRPC_ADDR",
			"VELVETROPE_ADMIN_TOKEN", "VELVETROPE_ADMIN_TOKENS", "VELVETROPE_ANALYTICS_TOKEN", "VELVETROPE_HASH_KEY", "VELVETROPE_PPROF_ADDR", "VELVETROPE_RULES_STORE",
			"CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}}, true, true},
	"checker": {command{"checker", "[flags]",
		"Serve the HTTP and Envoy gRPC APIs, sharing counters through Redis and Kafka.",
		[]string{"VELVETROPE_INSTANCE_ID", "VELVETROPE_RULES", "VELVETROPE_HTTP_ADDR", "VELVETROPE_GRPC_ADDR",
			"VELVETROPE_REDIS_ADDRS", "VELVETROPE_REDIS_PASSWORD", "VELVETROPE_KAFKA_BROKERS", "VELVETROPE_KAFKA_SASL_PASSWORD",
			"VELVETROPE_CLICKHOUSE_ADDR", "VELVETROPE_CLICKHOUSE_PASSWORD", "VELVETROPE_ADMIN_TOKEN", "VELVETROPE_ADMIN_TOKENS", "VELVETROPE_ANALYTICS_TOKEN",
			"VELVETROPE_HASH_KEY", "VELVETROPE_STATE_DIR", "VELVETROPE_PPROF_ADDR", "VELVETROPE_RULES_STORE",
			"VELVETROPE_RULES_STORE_REDIS_ADDRS", "CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}}, true, true},
	"aggregator": {command{"aggregator", "[flags]",
		"Apply consumption deltas from Kafka to the Redis counters, and usage to ClickHouse when clickhouse.addr is set;\n" +
			"/metrics, /healthz and /readyz on its HTTP listener.",
		[]string{"VELVETROPE_INSTANCE_ID", "VELVETROPE_HTTP_ADDR", "VELVETROPE_REDIS_ADDRS", "VELVETROPE_REDIS_PASSWORD",
			"VELVETROPE_KAFKA_BROKERS", "VELVETROPE_KAFKA_SASL_PASSWORD", "VELVETROPE_CLICKHOUSE_ADDR", "VELVETROPE_CLICKHOUSE_PASSWORD",
			"VELVETROPE_PPROF_ADDR"}}, false, false},
	"drain": {command{"drain", "[flags]",
		"Release deferred requests (kafka.deferred_topic) when their key has budget, and deliver them to their\n" +
			"rule's defer.target; /metrics, /healthz and /readyz on its HTTP listener.",
		[]string{"VELVETROPE_INSTANCE_ID", "VELVETROPE_RULES", "VELVETROPE_HTTP_ADDR", "VELVETROPE_REDIS_ADDRS",
			"VELVETROPE_REDIS_PASSWORD", "VELVETROPE_KAFKA_BROKERS", "VELVETROPE_KAFKA_SASL_PASSWORD", "VELVETROPE_HASH_KEY",
			"VELVETROPE_STATE_DIR", "VELVETROPE_PPROF_ADDR", "VELVETROPE_RULES_STORE", "VELVETROPE_RULES_STORE_REDIS_ADDRS",
			"CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}}, true, false},
}

// The other subcommands.
var (
	checkCommand = command{"check", "--domain D --descriptor k=v[,k2=v2] [--descriptor ...] [flags]",
		"Ask a running velvetrope over its gRPC listener (Envoy's ShouldRateLimit) and print the verdict and one\n" +
			"line per descriptor. Exit 0 allowed, 2 denied, 1 on any error, also a domain the service has no rules for\n" +
			"(which Envoy's API answers OK).", nil}
	topCommand = command{"top", "[flags]",
		"The most refused (denied + deferred) keys of a running velvetrope, from its HTTP listener's analytics.",
		[]string{"VELVETROPE_ANALYTICS_TOKEN"}}
	rulesCommand = command{"rules validate", "[--] FILE|DIR...",
		"Check rule files or directories: a summary per domain and exit 0, or FILE:LINE:COL: reason per error and\n" +
			"exit 1. The rules store's subcommands: velvetrope rules push|diff|dry-run|history|rollback --help.", nil}
	benchCommand = command{"bench", "[flags]",
		"Closed-loop gRPC load on a rate limit service (Envoy's ShouldRateLimit or gubernator's GetRateLimits):\n" +
			"requests/s and latency. With --serve-noop, a ShouldRateLimit that answers OK and does nothing.", nil}
	versionCommand = command{"version", "", "Print the version.", nil}
)

// rulesStoreCommands are the rules store's subcommands of `velvetrope
// rules`, over a running velvetrope's admin API.
var rulesStoreCommands = map[string]command{
	"push": {"rules push", "[--addr HOST:PORT] [--token T] [--message M] [--stage shadow] FILE|DIR...",
		"Write each rule file's domain to the rules store of a running velvetrope as its next version, after\n" +
			"printing how it differs from the store's; a domain whose document is already current is left alone, so\n" +
			"CI can run it on every merge. Exit 0 when every domain is current, 1 otherwise.",
		[]string{"VELVETROPE_ADMIN_TOKEN"}},
	"diff": {"rules diff", "[--addr HOST:PORT] FILE|DIR...",
		"Print how each rule file's domain differs from the rules store's current version; write nothing.\n" +
			"Exit 0 when the store holds every file's document, 1 when one differs or on an error.",
		[]string{"VELVETROPE_ADMIN_TOKEN"}},
	"history": {"rules history", "[--addr HOST:PORT] [--limit 20] DOMAIN",
		"List a domain's versions in the rules store, newest first: time, author, size, message.",
		[]string{"VELVETROPE_ADMIN_TOKEN"}},
	"dry-run": {"rules dry-run", "[--addr HOST:PORT] [--token T] [--window 24h] FILE|DIR...",
		"Replay the window's usage (the analytics' rows) through each rule file's domain as proposed, on a running\n" +
			"velvetrope: per rule the requests it would have refused and whose, beside what the live rules refused.\n" +
			"Writes nothing.",
		[]string{"VELVETROPE_ADMIN_TOKEN"}},
	"rollback": {"rules rollback", "--to N [--addr HOST:PORT] [--token T] [--message M] DOMAIN",
		"Make version N's document of DOMAIN current again, as a new version.",
		[]string{"VELVETROPE_ADMIN_TOKEN"}},
	"promote": {"rules promote", "[--addr HOST:PORT] [--token T] [--message M] DOMAIN",
		"Make DOMAIN's staged version (rules push --stage shadow) live, as a new version.",
		[]string{"VELVETROPE_ADMIN_TOKEN"}},
	"clients": {"rules clients", "[--addr HOST:PORT] [--token T] [--import FILE.csv | --set PLAN | --remove | --get] DOMAIN TABLE [VALUE...]",
		"Per-client limits: show a client table of the rules store (its clients, plan names and what each live rule\n" +
			"gives each plan); --import a CSV of VALUE[,VALUE...],PLAN rows (an empty PLAN removes the client), sent\n" +
			"in batches; --set one client's plan, --remove it, or --get it with each rule's limit for it.",
		[]string{"VELVETROPE_ADMIN_TOKEN"}},
}

// usageHead is the top-level usage before its list of variables.
const usageHead = `velvetrope — a distributed rate limiter

Usage:
  velvetrope dev [--rules PATH] [--http ADDR] [--grpc ADDR] [--config FILE] [--debug]
                                   serve the HTTP and Envoy gRPC APIs on embedded in-memory backends
  velvetrope checker [--rules PATH] [--http ADDR] [--grpc ADDR] [--config FILE] [--debug]
                                   serve both APIs, sharing counters through Redis and Kafka
  velvetrope aggregator [--http ADDR] [--config FILE] [--debug]
                                   apply consumption deltas from Kafka to the Redis counters,
                                   and usage to ClickHouse when VELVETROPE_CLICKHOUSE_ADDR is set
  velvetrope drain [--rules PATH] [--http ADDR] [--config FILE] [--debug]
                                   release deferred requests (kafka.deferred_topic) when their key
                                   has budget, and deliver them to their rule's defer.target
  velvetrope check --domain D --descriptor k=v[,k2=v2] [--descriptor ...] [--hits N] [--addr HOST:PORT] [--timeout 2s]
                                   ask a running velvetrope (gRPC); exit 0 allow, 2 deny, 1 error
                                   (also an unknown domain)
  velvetrope top [--window 1h] [--domain D] [--rule ID] [--limit 10] [--addr HOST:PORT] [--token T] [--json] [--timeout 10s]
                 [--pools]          the most denied keys of a running velvetrope (HTTP), or with --pools the
                                   elastic pools' borrowings
  velvetrope rules validate PATH... check rule files or directories; exit 1 on errors
  velvetrope rules push|diff PATH... [--addr HOST:PORT] [--token T] [--message M]
                                   write rule files' domains to a running velvetrope's rules store (or show the diff)
  velvetrope rules dry-run PATH... [--window 24h]
                                   what rule files would have refused of the window's real traffic
  velvetrope rules history DOMAIN | rules rollback --to N DOMAIN
                                   a domain's versions in the rules store; make an old one current again
  velvetrope bench [--addr HOST:PORT[,...]] [--protocol envoy|gubernator] [--callers 64] [--conns 4]
                   [--duration 10s] [--keys 1000] [--json]
                                   closed-loop gRPC load on a rate limit service: requests/s and latency
  velvetrope bench --serve-noop ADDR
                                   a ShouldRateLimit that answers OK and does nothing: the ceiling
  velvetrope version               print the version

'velvetrope COMMAND --help' lists the command's flags and the variables it reads.

A process (dev, checker, aggregator, drain) that cannot start prints the cause
on one line and exits 1; --debug also prints fx's event log, its whole text of
the error, and the process's log lines.

Environment (flags override it; it overrides the --config file):
`

// usage is the top-level usage: the commands, then every variable.
var usage = func() string {
	var b strings.Builder
	b.WriteString(usageHead)
	names := make([]string, len(envVars))
	for i, e := range envVars {
		names[i] = e.name
	}
	writeEnv(&b, names)
	return b.String()
}()
