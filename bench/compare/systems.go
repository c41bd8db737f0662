package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/bench/loadgen"
)

// served is one running system under test.
type served struct {
	name      string
	addr      string // gRPC
	protocol  loadgen.Protocol
	domain    string
	usesRedis bool
	metrics   string // a velvetrope checker's /metrics URL
	aggregate string // its aggregator's /metrics URL
	procs     []*proc
	checker   *proc
	kafkaPID  int               // the broker the system sends to (0: none)
	pprof     map[string]string // process name → its debug.pprof_addr (--profiles)
}

// settle waits until the aggregator has taken in every delta the checker
// emitted, so a row never pays for the backlog of the one before; it
// reports how long that took.
func (s *served) settle() time.Duration {
	if s.aggregate == "" {
		return 0
	}
	start := time.Now()
	for time.Since(start) < 3*time.Minute {
		emitted := metric(s.metrics, "velvetrope_checker_deltas_emitted_total")
		taken := metric(s.aggregate, "velvetrope_aggregator_deltas_applied_total") +
			metric(s.aggregate, "velvetrope_aggregator_deltas_already_applied_total") +
			metric(s.aggregate, "velvetrope_aggregator_deltas_skipped_total")
		if emitted >= 0 && taken >= emitted {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Since(start)
}

func (s *served) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].stop()
	}
}

// snapshot is what a row's counters read before and after it.
type snapshot struct {
	// the whole system's: CPU seconds of its own processes and of the
	// Kafka broker, its processes' resident bytes and Redis's memory
	svcCPU, kafkaCPU, svcRSS, redisMem                        float64
	redis, redisCPU, decisions, deltas, records, charges, rss float64
	aggScripts, aggDeltas                                     float64 // the aggregator's script calls and deltas taken
}

func (s *served) counters(ctx context.Context, rc *redis.Client) snapshot {
	var sn snapshot
	if s.usesRedis {
		sn.redis, sn.redisCPU = redisCalls(ctx, rc)
		sn.redisMem = redisMemory(ctx, rc)
	}
	for _, p := range s.procs {
		sn.svcCPU += cpuSeconds(p.cmd.Process.Pid)
		sn.svcRSS += float64(p.rss())
	}
	if s.kafkaPID > 0 {
		sn.kafkaCPU = cpuSeconds(s.kafkaPID)
	}
	if s.metrics != "" {
		sn.decisions = metric(s.metrics, "velvetrope_checker_decisions_total")
		sn.deltas = metric(s.metrics, "velvetrope_checker_deltas_emitted_total")
		sn.records = metric(s.metrics, "velvetrope_producer_records_total")
		sn.charges = metric(s.metrics, "velvetrope_checker_store_charges_total")
		sn.rss = float64(s.checker.rss())
	}
	if s.aggregate != "" {
		sn.aggScripts = metric(s.aggregate, "velvetrope_aggregator_redis_scripts_total")
		sn.aggDeltas = metric(s.aggregate, "velvetrope_aggregator_deltas_applied_total") +
			metric(s.aggregate, "velvetrope_aggregator_deltas_already_applied_total") +
			metric(s.aggregate, "velvetrope_aggregator_deltas_skipped_total")
	}
	return sn
}

// redisMemory is Redis's used_memory (INFO memory), in bytes.
func redisMemory(ctx context.Context, rc *redis.Client) float64 {
	info, err := rc.Info(ctx, "memory").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			x, _ := strconv.ParseFloat(v, 64)
			return x
		}
	}
	return 0
}

// redisCalls is the total of INFO commandstats' calls (commands a script
// runs count too) and the server's CPU seconds (user + system).
func redisCalls(ctx context.Context, rc *redis.Client) (calls, cpu float64) {
	info, err := rc.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return 0, 0
	}
	var n float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				cpu += x
			}
		}
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		if i := strings.Index(line, "calls="); i >= 0 {
			v := line[i+len("calls="):]
			if j := strings.IndexByte(v, ','); j >= 0 {
				v = v[:j]
			}
			f, _ := strconv.ParseFloat(v, 64)
			n += f
		}
	}
	return n, cpu
}

// unlimited is a per-second limit far above any load here: every answer
// is OK, so the figures measure the cost of a decision, not of refusing.
const unlimited = 1_000_000_000

// launch starts one system and waits until it answers.
func launch(name string, o options, dir string) (*served, error) {
	switch name {
	case "ceiling":
		addr := freeAddr()
		p, err := start(dir, name, filepath.Join(o.bin, "velvetrope"), []string{"bench", "--serve-noop", addr}, nil)
		if err != nil {
			return nil, err
		}
		s := &served{name: name, addr: addr, protocol: loadgen.Envoy, domain: "bench", procs: []*proc{p}}
		return s, waitServing(p, addr, s.protocol, s.domain)
	case "envoy":
		return launchEnvoy(o, dir)
	case "gubernator":
		addr, ml := freeAddr(), freeAddr()
		// a one-node member list: the node knows only itself
		p, err := start(dir, name, filepath.Join(o.bin, "gubernator"), nil, []string{
			"GUBER_GRPC_ADDRESS=" + addr, "GUBER_HTTP_ADDRESS=" + freeAddr(), "GUBER_ADVERTISE_ADDRESS=" + addr,
			"GUBER_PEER_DISCOVERY_TYPE=member-list", "GUBER_MEMBERLIST_BIND_ADDRESS=" + ml, "GUBER_MEMBERLIST_KNOWN_NODES=" + ml,
			"GUBER_LOG_LEVEL=warn", "GUBER_INSTANCE_ID=bench", "OTEL_TRACES_EXPORTER=none"})
		if err != nil {
			return nil, err
		}
		s := &served{name: name, addr: addr, protocol: loadgen.Gubernator, domain: "bench", procs: []*proc{p}}
		return s, waitServing(p, addr, s.protocol, s.domain)
	case "velvetrope-async", "velvetrope-sync":
		return launchVelvetrope(name, o, dir)
	}
	return nil, fmt.Errorf("unknown system %q", name)
}

// launchEnvoy runs envoy's ratelimit service with its defaults but for
// the addresses, Redis over TCP, no statsd, and the same rule as ours.
func launchEnvoy(o options, dir string) (*served, error) {
	root := filepath.Join(dir, "envoy-runtime")
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		return nil, err
	}
	rules := fmt.Sprintf("domain: bench\ndescriptors:\n  - key: user_id\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", unlimited)
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(rules), 0o644); err != nil {
		return nil, err
	}
	addr := freeAddr()
	_, grpcPort, _ := strings.Cut(addr, ":")
	_, httpPort, _ := strings.Cut(freeAddr(), ":")
	_, debugPort, _ := strings.Cut(freeAddr(), ":")
	p, err := start(dir, "envoy", filepath.Join(o.bin, "service_cmd"), nil, []string{
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "PORT=" + httpPort, "GRPC_PORT=" + grpcPort,
		"DEBUG_PORT=" + debugPort, "USE_STATSD=false", "LOG_LEVEL=warn", "RUNTIME_ROOT=" + root,
		"RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + o.redis,
		"BACKEND_TYPE=redis"})
	if err != nil {
		return nil, err
	}
	s := &served{name: "envoy", addr: addr, protocol: loadgen.Envoy, domain: "bench", usesRedis: true, procs: []*proc{p}}
	return s, waitServing(p, addr, s.protocol, s.domain)
}

// launchVelvetrope runs one checker and one aggregator on the real
// pipeline (Kafka, Redis), with a fresh topic and group for the run.
func launchVelvetrope(name string, o options, dir string) (*served, error) {
	mode := ""
	if name == "velvetrope-sync" {
		mode = "    mode: sync\n"
	}
	rules := fmt.Sprintf("domain: bench\ndescriptors:\n  - key: user_id\n%s    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", mode, unlimited)
	rulesPath := filepath.Join(dir, name+"-rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rules), 0o644); err != nil {
		return nil, err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := fmt.Sprintf("kafka:\n  topic: velvetrope.bench.%s\naggregator:\n  group: velvetrope-bench-%s\n", run, run)
	if name == "velvetrope-sync" {
		// a Redis database of its own: the two velvetrope systems are up
		// together, and one would count the other's checker as a peer
		// (first-touch allowances, slices)
		cfg += "redis:\n  db: 1\n"
	}
	cfgPath := filepath.Join(dir, name+"-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	env := []string{"VELVETROPE_REDIS_ADDRS=" + o.redis, "VELVETROPE_KAFKA_BROKERS=" + o.kafka, "VELVETROPE_CLICKHOUSE_ADDR="}
	grpcAddr, httpAddr, aggHTTP := freeAddr(), freeAddr(), freeAddr()
	bin := filepath.Join(o.bin, "velvetrope")
	pprof := map[string]string{}
	withPprof := func(proc string, env []string) []string {
		if o.profiles == "" {
			return env
		}
		pprof[proc] = freeAddr()
		return append(env, "VELVETROPE_PPROF_ADDR="+pprof[proc])
	}
	c, err := start(dir, name+"-checker", bin, []string{"checker", "--config", cfgPath, "--rules", rulesPath,
		"--grpc", grpcAddr, "--http", httpAddr}, withPprof("checker", append(env, "VELVETROPE_INSTANCE_ID=bench-checker",
		"VELVETROPE_STATE_DIR="+filepath.Join(dir, name+"-state"))))
	if err != nil {
		return nil, err
	}
	s := &served{name: name, addr: grpcAddr, protocol: loadgen.Envoy, domain: "bench", usesRedis: true,
		metrics: "http://" + httpAddr + "/metrics", procs: []*proc{c}, checker: c, kafkaPID: listener(o.kafka), pprof: pprof}
	a, err := start(dir, name+"-aggregator", bin, []string{"aggregator", "--config", cfgPath, "--http", aggHTTP},
		withPprof("aggregator", append(env, "VELVETROPE_INSTANCE_ID=bench-aggregator")))
	if err != nil {
		s.stop()
		return nil, err
	}
	s.procs = append(s.procs, a)
	s.aggregate = "http://" + aggHTTP + "/metrics"
	if err := waitHTTP(c, "http://"+httpAddr+"/readyz"); err != nil {
		s.stop()
		return nil, err
	}
	if err := waitHTTP(a, "http://"+aggHTTP+"/readyz"); err != nil {
		s.stop()
		return nil, err
	}
	if err := waitServing(c, grpcAddr, s.protocol, s.domain); err != nil {
		s.stop()
		return nil, err
	}
	// A checker spends first-touch allowances only once every other has
	// heard of it (instance_ttl + heartbeat + store_timeout + 2 × max_clock_skew
	// after its first heartbeat, 4.35 s by default: docs/design.md); the
	// rows measure one that has, as a fleet's checkers are but at a start.
	time.Sleep(firstTouchSettle)
	return s, nil
}

// firstTouchSettle outlasts the default settings' wait before a checker
// spends first-touch allowances.
const firstTouchSettle = 5 * time.Second
