package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// bin is the velvetrope binary, built once by TestMain: a failed start is
// checked on what the real process prints and exits with.
var bin string

func TestMain(m *testing.M) { os.Exit(testsvc.RunWithBinary(m, &bin)) }

// startCase is one failing start of the binary: its arguments, its
// environment (nothing else: no VELVETROPE_* of the shell), the files it
// finds in its working directory, and the whole of what it must print on
// stderr.
type startCase struct {
	name   string
	args   []string
	env    []string
	files  map[string]string
	stderr string
}

// runStart runs c in a directory of its own and checks its exit code and
// its stderr, whole; stdout stays empty (no banner).
func runStart(t *testing.T, c startCase) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range c.files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, c.args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "VELVETROPE_STATE_DIR=" + filepath.Join(dir, "state")}, c.env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s: still running after 30s; stderr:\n%s", c.name, stderr.String())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	const want = 1
	if code != want || stdout.Len() > 0 || (c.stderr != "" && stderr.String() != c.stderr) {
		t.Fatalf("%s: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d, no stdout, stderr:\n%s", c.name, code, stdout.String(), stderr.String(), want, c.stderr)
	}
	return stderr.String()
}

// busyAddr is a loopback address something already listens on, for the
// test's life.
func busyAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestStartFailures: issue 20, item 5. A start that fails prints one line
// per problem, "velvetrope PROCESS: STAGE: cause", and exits 1; before,
// the cause came after fx's text ("could not build arguments for function
// ..."), a config error exited 2, and an unknown field named a Go type.
func TestStartFailures(t *testing.T) {
	const ruleFile = "domain: shop\ndescriptors:\n  - key: cart\n    rate_limit: {unit: second, requests_per_unit: 3}\n"
	local := []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}
	redisOnly := []string{"VELVETROPE_REDIS_ADDRS=127.0.0.1:1"}
	unreachable := []string{"VELVETROPE_REDIS_ADDRS=127.0.0.1:1", "VELVETROPE_KAFKA_BROKERS=127.0.0.1:1"}
	busy := busyAddr(t)
	httpKnown := "known: addr, tls, max_body_bytes, read_timeout, write_timeout, max_in_flight, max_body_bytes_in_flight\n"
	cases := []startCase{
		// rules
		{name: "dev, a rule file that is not there", args: []string{"dev", "--rules", "nope.yaml"},
			stderr: "velvetrope dev: rules: nope.yaml: no such file or directory\n"},
		{name: "dev, rule files with errors: one line each", args: append([]string{"dev", "--rules", "rules"}, local...),
			files: map[string]string{"rules/a.yaml": "domain: shop\nbogus: 1\n", "rules/b.yaml": ruleFile + "    shadow_mode: maybe\n"},
			stderr: "velvetrope dev: rules: rules/a.yaml:2:1: rule file: unknown field \"bogus\" (known: domain, pools, descriptors)\n" +
				"velvetrope dev: rules: rules/b.yaml:5:18: shadow_mode: want true or false, got \"maybe\"\n"},
		{name: "checker, a rule file that is not there", args: append([]string{"checker", "--rules", "nope.yaml"}, local...), env: unreachable,
			stderr: "velvetrope checker: rules: nope.yaml: no such file or directory\n"},

		// backends not configured
		{name: "checker, no Redis", args: []string{"checker"},
			stderr: "velvetrope checker: redis: no address: set VELVETROPE_REDIS_ADDRS or redis.addrs\n"},
		{name: "aggregator, no Redis", args: []string{"aggregator"},
			stderr: "velvetrope aggregator: redis: no address: set VELVETROPE_REDIS_ADDRS or redis.addrs\n"},
		{name: "drain, no Redis", args: []string{"drain"},
			stderr: "velvetrope drain: redis: no address: set VELVETROPE_REDIS_ADDRS or redis.addrs\n"},
		{name: "checker, no Kafka", args: []string{"checker"}, env: redisOnly,
			stderr: "velvetrope checker: kafka: no broker: set VELVETROPE_KAFKA_BROKERS or kafka.brokers\n"},
		{name: "aggregator, no Kafka", args: []string{"aggregator"}, env: redisOnly,
			stderr: "velvetrope aggregator: kafka: no broker: set VELVETROPE_KAFKA_BROKERS or kafka.brokers\n"},
		{name: "drain, no Kafka", args: []string{"drain"}, env: redisOnly,
			stderr: "velvetrope drain: kafka: no broker: set VELVETROPE_KAFKA_BROKERS or kafka.brokers\n"},

		// backends that do not answer
		{name: "checker, Redis refuses", args: append([]string{"checker"}, local...), env: unreachable,
			stderr: "velvetrope checker: redis: 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused\n"},
		{name: "aggregator, Redis refuses", args: []string{"aggregator", "--http", "127.0.0.1:0"}, env: unreachable,
			stderr: "velvetrope aggregator: redis: 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused\n"},
		{name: "drain, Kafka refuses", args: []string{"drain", "--http", "127.0.0.1:0"}, env: unreachable,
			stderr: "velvetrope drain: kafka: topic velvetrope.deferred: no broker answers: failed to dial: failed to open connection to 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused\n"},

		// listeners
		{name: "dev, HTTP address taken", args: []string{"dev", "--http", busy, "--grpc", "127.0.0.1:0"},
			stderr: "velvetrope dev: http: listen tcp " + busy + ": bind: address already in use\n"},
		{name: "dev, gRPC address taken", args: []string{"dev", "--http", "127.0.0.1:0", "--grpc", busy},
			stderr: "velvetrope dev: grpc: listen tcp " + busy + ": bind: address already in use\n"},
		{name: "dev, pprof address taken", args: append([]string{"dev"}, local...), env: []string{"VELVETROPE_PPROF_ADDR=" + busy},
			stderr: "velvetrope dev: pprof: listen tcp " + busy + ": bind: address already in use\n"},

		// the config file
		{name: "dev, no such config file", args: []string{"dev", "--config", "nope.yaml"},
			stderr: "velvetrope dev: config: nope.yaml: no such file or directory\n"},
		{name: "dev, unknown field", args: []string{"dev", "--config", "c.yaml"}, files: map[string]string{"c.yaml": "http:\n  adr2: x\n"},
			stderr: "velvetrope dev: config: c.yaml:2:3: http.adr2: unknown field; " + httpKnown},
		{name: "checker, unknown field three deep", args: []string{"checker", "--config", "c.yaml"},
			files:  map[string]string{"c.yaml": "kafka:\n  sasl:\n    mechanizm: plain\n"},
			stderr: "velvetrope checker: config: c.yaml:3:5: kafka.sasl.mechanizm: unknown field; known: mechanism, username, password\n"},
		{name: "aggregator, a number for a duration", args: []string{"aggregator", "--config", "c.yaml"},
			files:  map[string]string{"c.yaml": "aggregator:\n  batch_wait: 20\n"},
			stderr: "velvetrope aggregator: config: c.yaml:2:15: aggregator.batch_wait: want a duration such as 250ms, 5s or 1h30m, got 20\n"},
		{name: "drain, an invalid value", args: []string{"drain", "--config", "c.yaml"},
			files:  map[string]string{"c.yaml": "deferred:\n  workers: 0\n"},
			stderr: "velvetrope drain: config: c.yaml:2:3: deferred.workers: must be between 1 and 4096, got 0\n"},
		{name: "dev, every problem of the file", args: []string{"dev", "--config", "c.yaml"},
			files: map[string]string{"c.yaml": "http:\n  adr: x\n  max_in_flight: lots\nredis:\n  addrs: [127.0.0.1:6379, {host: r}]\n"},
			stderr: "velvetrope dev: config: c.yaml:2:3: http.adr: unknown field; " + httpKnown +
				"velvetrope dev: config: c.yaml:3:18: http.max_in_flight: want an integer from -9223372036854775808 to 9223372036854775807, got \"lots\"\n" +
				"velvetrope dev: config: c.yaml:5:27: redis.addrs[1]: want a string, got a mapping\n"},

		// the environment and the flags
		{name: "dev, a bad variable", args: []string{"dev"}, env: []string{"VELVETROPE_HTTP_ADDR=8080"},
			stderr: "velvetrope dev: config: VELVETROPE_HTTP_ADDR: http.addr: want host:port, got \"8080\" (address 8080: missing port in address)\n"},
		{name: "checker, a bad item of a variable's list", args: []string{"checker"}, env: []string{"VELVETROPE_KAFKA_BROKERS=127.0.0.1:9092,kafka"},
			stderr: "velvetrope checker: config: VELVETROPE_KAFKA_BROKERS: kafka.brokers[1]: want host:port, got \"kafka\" (address kafka: missing port in address)\n"},
		{name: "drain, a bad flag", args: []string{"drain", "--http", "8080"},
			stderr: "velvetrope drain: config: --http: http.addr: want host:port, got \"8080\" (address 8080: missing port in address)\n"},
		{name: "aggregator, a flag over a bad file value", args: []string{"aggregator", "--config", "c.yaml", "--http", "127.0.0.1:0"},
			files:  map[string]string{"c.yaml": "http:\n  addr: nope\n"},
			stderr: "velvetrope aggregator: redis: no address: set VELVETROPE_REDIS_ADDRS or redis.addrs\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runStart(t, c) })
	}
}

// TestStartFailureDebug: --debug adds fx's event log and its whole text
// of the error (and the process's own log lines); the last line is still
// the one-line cause.
func TestStartFailureDebug(t *testing.T) {
	out := runStart(t, startCase{name: "checker --debug, no Redis", args: []string{"checker", "--debug"}})
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, want := range []string{"[Fx] PROVIDE\t", "could not build arguments for function", `msg="rules loaded"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, out)
		}
	}
	if last := lines[len(lines)-1]; last != "velvetrope checker: redis: no address: set VELVETROPE_REDIS_ADDRS or redis.addrs" {
		t.Fatalf("last line %q; stderr:\n%s", last, out)
	}
}

// TestStartFailureKafkaAtStart: the aggregator joins Kafka in its start
// hook, after Redis answered (a real one).
func TestStartFailureKafkaAtStart(t *testing.T) {
	redisAddr := testsvc.Redis(t)
	runStart(t, startCase{name: "aggregator, Kafka refuses", args: []string{"aggregator", "--http", "127.0.0.1:0"},
		env:    []string{"VELVETROPE_REDIS_ADDRS=" + redisAddr, "VELVETROPE_KAFKA_BROKERS=127.0.0.1:1"},
		stderr: "velvetrope aggregator: kafka: topic velvetrope.deltas: no broker answers: failed to dial: failed to open connection to 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused\n"})
}
