// Command velvetrope is the one binary of velvetrope: the checker, the
// aggregator, the dev server and the operator tools, as subcommands.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `velvetrope — a distributed rate limiter

Usage:
  velvetrope dev [--rules PATH] [--http ADDR] [--grpc ADDR] [--config FILE]
                                   serve the HTTP and Envoy gRPC APIs on embedded in-memory backends
  velvetrope checker [--rules PATH] [--http ADDR] [--grpc ADDR] [--config FILE]
                                   serve both APIs, sharing counters through Redis and Kafka
  velvetrope aggregator [--http ADDR] [--config FILE]
                                   apply consumption deltas from Kafka to the Redis counters,
                                   and usage to ClickHouse when VELVETROPE_CLICKHOUSE_ADDR is set
  velvetrope drain [--rules PATH] [--http ADDR] [--config FILE]
                                   release deferred requests (kafka.deferred_topic) when their key
                                   has budget, and deliver them to their rule's defer.target
  velvetrope check --domain D --descriptor k=v[,k2=v2] [--descriptor ...] [--hits N] [--addr HOST:PORT]
                                   ask a running velvetrope (gRPC); exit 0 allow, 2 deny, 1 error
  velvetrope top [--window 1h] [--domain D] [--rule ID] [--limit 10] [--addr HOST:PORT] [--json]
                                   the most denied keys of a running velvetrope (HTTP)
  velvetrope rules validate PATH... check rule files or directories; exit 1 on errors
  velvetrope bench [--addr HOST:PORT[,...]] [--protocol envoy|gubernator] [--callers 64] [--conns 4]
                   [--duration 10s] [--keys 1000] [--json]
                                   closed-loop gRPC load on a rate limit service: requests/s and latency
  velvetrope bench --serve-noop ADDR
                                   a ShouldRateLimit that answers OK and does nothing: the ceiling
  velvetrope version               print the version

Environment overrides (every process): VELVETROPE_RULES, VELVETROPE_HTTP_ADDR,
VELVETROPE_GRPC_ADDR, VELVETROPE_REDIS_ADDRS, VELVETROPE_KAFKA_BROKERS,
VELVETROPE_CLICKHOUSE_ADDR, VELVETROPE_INSTANCE_ID.

A process (dev, checker, aggregator, drain) that cannot start prints the cause
on one line and exits 1; --debug also prints fx's event log, its whole text of
the error, and the process's log lines.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "dev":
		return runDev(args[1:], stdout, stderr)
	case "checker":
		return runChecker(args[1:], stdout, stderr)
	case "aggregator":
		return runAggregator(args[1:], stdout, stderr)
	case "drain":
		return runDrain(args[1:], stdout, stderr)
	case "rules":
		return runRules(args[1:], stdout, stderr)
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "top":
		return runTop(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "velvetrope", version())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "velvetrope: unknown command %q\n\n%s", args[0], usage)
	return 2
}
