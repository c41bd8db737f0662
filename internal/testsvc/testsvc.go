// Package testsvc gives integration tests the addresses of the real
// services that scripts/services.sh starts (Redis, a Redis Cluster, Kafka,
// ClickHouse) and names that keep parallel test packages apart.
//
// A test asks for a service with [Redis], [RedisCluster], [Kafka] or
// [ClickHouse]. When the address variable is unset (a plain `go test
// ./...`) the test is skipped; when it is set, the service must answer, or
// the test fails: a configured service that is down is a failure, never a
// silent skip.
package testsvc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Variables holding the service addresses (host:port, no scheme).
const (
	EnvRedis        = "VELVETROPE_TEST_REDIS"
	EnvRedisCluster = "VELVETROPE_TEST_REDIS_CLUSTER" // comma-separated
	EnvKafka        = "VELVETROPE_TEST_KAFKA"
	EnvClickHouse   = "VELVETROPE_TEST_CLICKHOUSE" // native protocol port
	EnvScript       = "VELVETROPE_TEST_SERVICES_SCRIPT"
	EnvChromium     = "VELVETROPE_TEST_CHROMIUM" // path of Debian's chromium, for the dashboard test
)

func addrs(t testing.TB, env string) []string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		t.Skipf("%s is unset: run `make test` (or source .services.env) for integration tests", env)
	}
	var out []string
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			t.Fatalf("%s=%q: want host:port[,host:port]: %v", env, v, err)
		}
		conn, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err != nil {
			t.Fatalf("%s is set but %s does not answer: %v", env, a, err)
		}
		conn.Close()
		out = append(out, a)
	}
	return out
}

// Redis returns the standalone Redis address.
func Redis(t testing.TB) string { t.Helper(); return addrs(t, EnvRedis)[0] }

// RedisCluster returns the seed addresses of the 3-node Redis Cluster.
func RedisCluster(t testing.TB) []string { t.Helper(); return addrs(t, EnvRedisCluster) }

// Kafka returns the broker address.
func Kafka(t testing.TB) string { t.Helper(); return addrs(t, EnvKafka)[0] }

// ClickHouse returns the ClickHouse native-protocol address.
func ClickHouse(t testing.TB) string { t.Helper(); return addrs(t, EnvClickHouse)[0] }

// Chromium returns the path of the headless browser scripts/services.sh
// installed; it skips when the variable is unset and fails when the path
// is not an executable.
func Chromium(t testing.TB) string {
	t.Helper()
	p := strings.TrimSpace(os.Getenv(EnvChromium))
	if p == "" {
		t.Skipf("%s is unset: run `make test` (or source .services.env) for browser tests", EnvChromium)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s=%q is not an executable: %v", EnvChromium, p, err)
	}
	return p
}

// Unique returns prefix plus a random suffix safe in Redis keys, Kafka
// topic names and ClickHouse identifiers, so that tests running in parallel
// against the same services never share state.
func Unique(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return prefix + "_" + hex.EncodeToString(b[:])
}

// Private is a server of one test's own (a Kafka broker or a ClickHouse
// server), started and stopped through scripts/services.sh, for tests that
// need an outage without disturbing the shared services. Its data survives
// a Stop and a Start.
type Private struct {
	Addr   string
	script string
	kind   string // the script's command: private-kafka, private-clickhouse
	name   string
	env    []string // extra environment of the script
}

// PrivateKafka is a broker of one test's own.
type PrivateKafka = Private

// StartPrivateKafka starts a private broker and stops it when the test
// ends. It skips like [Kafka] when the shared services are not configured,
// and fails when the script cannot start the broker.
func StartPrivateKafka(t testing.TB) *Private {
	t.Helper()
	Kafka(t) // same skip/fail rule as the shared broker
	return startPrivate(t, "private-kafka", "pk")
}

// StartPrivateClickHouse starts a private ClickHouse server and stops it
// when the test ends, with the skip and fail rules of [ClickHouse].
func StartPrivateClickHouse(t testing.TB) *Private {
	t.Helper()
	ClickHouse(t)
	return startPrivate(t, "private-clickhouse", "pc")
}

// StartPrivateClickHouseTLS starts a private ClickHouse server that
// speaks the native protocol over TLS with the PEM certificate and key
// files given; Addr is its TLS address.
func StartPrivateClickHouseTLS(t testing.TB, certFile, keyFile string) *Private {
	t.Helper()
	ClickHouse(t)
	return startPrivate(t, "private-clickhouse", "pt", "VELVETROPE_CH_TLS_CERT="+certFile, "VELVETROPE_CH_TLS_KEY="+keyFile)
}

func startPrivate(t testing.TB, kind, prefix string, env ...string) *Private {
	t.Helper()
	script := os.Getenv(EnvScript)
	if script == "" {
		t.Fatalf("%s is unset: run the tests through `make test`", EnvScript)
	}
	p := &Private{script: script, kind: kind, name: Unique(prefix), env: env}
	p.Start(t)
	t.Cleanup(func() { p.Stop(t) })
	return p
}

// Start starts the server again after Stop.
func (p *Private) Start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(p.script, p.kind, "start", p.name)
	cmd.Env = append(os.Environ(), p.env...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s start: %v\n%s", p.kind, err, ee.Stderr)
		}
		t.Fatalf("%s start: %v", p.kind, err)
	}
	p.Addr = strings.TrimSpace(string(out))
}

// Stop stops the server (the outage).
func (p *Private) Stop(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(p.script, p.kind, "stop", p.name).CombinedOutput(); err != nil {
		t.Fatalf("%s stop: %v\n%s", p.kind, err, out)
	}
}

// StartRedisWithPassword starts a private redis-server (the binary
// scripts/services.sh installed) on a free loopback port that requires
// password, and stops it, by PID, when the test ends. It skips like
// [Redis] when the shared services are not configured.
func StartRedisWithPassword(t testing.TB, password string) string {
	t.Helper()
	return startPrivateRedis(t, func(port string) []string {
		return []string{"--port", port, "--requirepass", password}
	})
}

// StartRedisTLS starts a private redis-server that speaks only TLS with
// the given server certificate and key (client certificates not
// required), like [StartRedisWithPassword].
func StartRedisTLS(t testing.TB, certFile, keyFile, caFile string) string {
	t.Helper()
	return startPrivateRedis(t, func(port string) []string {
		return []string{"--port", "0", "--tls-port", port, "--tls-cert-file", certFile, "--tls-key-file", keyFile,
			"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no"}
	})
}

// redisServer finds the redis-server binary scripts/services.sh installed
// and a free loopback address for a private server, with the skip and fail
// rules of [Redis].
func redisServer(t testing.TB) (bin, addr string) {
	t.Helper()
	Redis(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found, although the shared Redis runs: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return bin, ln.Addr().String()
}

func startPrivateRedis(t testing.TB, args func(port string) []string) string {
	t.Helper()
	bin, addr := redisServer(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir()}, args(port)...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitListen(t, addr)
	return addr
}

// waitListen polls addr until it accepts a connection (10 s at most): a
// server just started answers in its own time.
func waitListen(t testing.TB, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("private redis-server did not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PrivateRedis is a redis-server of one test's own that can be stopped and
// started again on the same address, for outage tests. It keeps its data
// across a Stop and a Start (append-only file, fsync on every write), as
// a production Redis with persistence would.
type PrivateRedis struct {
	Addr string
	bin  string
	dir  string
	cmd  *exec.Cmd
}

// StartPrivateRedis starts a persistent private redis-server and stops it
// when the test ends; it skips like [Redis].
func StartPrivateRedis(t testing.TB) *PrivateRedis {
	t.Helper()
	bin, addr := redisServer(t)
	p := &PrivateRedis{Addr: addr, bin: bin, dir: t.TempDir()}
	p.Start(t)
	t.Cleanup(func() { p.Stop(t) })
	return p
}

// Start starts the server (again) on its address.
func (p *PrivateRedis) Start(t testing.TB) {
	t.Helper()
	if p.cmd != nil {
		return
	}
	_, port, _ := net.SplitHostPort(p.Addr)
	cmd := exec.Command(p.bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "yes",
		"--appendfsync", "always", "--dir", p.dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	p.cmd = cmd
	waitListen(t, p.Addr)
}

// Stop shuts the server down (SIGTERM: it finishes its append-only file)
// and waits for it.
func (p *PrivateRedis) Stop(t testing.TB) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

// RunWithBinary builds the velvetrope binary into a temporary directory,
// points *bin at it, runs m and removes the directory: the TestMain of a
// suite that runs the real processes. The build's output goes to stderr;
// a failed build exits 1.
func RunWithBinary(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "velvetrope-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*bin = filepath.Join(dir, "velvetrope")
	build := exec.Command("go", "build", "-o", *bin, "github.com/velvetrope/velvetrope/cmd/velvetrope")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building velvetrope:", err)
		return 1
	}
	return m.Run()
}
