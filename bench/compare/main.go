// Command compare runs velvetrope side by side with envoy's ratelimit
// service and gubernator under the same load (`make bench-compare`), and
// writes the table into docs/benchmarks.md and a chart beside it.
//
// Every server runs as its own process on 127.0.0.1; the load comes from
// `velvetrope bench`, also its own process; all of them share the
// machine's cores with Redis and Kafka. The ceiling is a no-op
// ShouldRateLimit server: what any rate limit service could reach with
// this load generator on this machine. The peers are the binaries `make
// bench-compare` installs into bin/ with `go install` (tools we run, never
// part of the repository).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/bench/loadgen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	bin, out, chart  string
	redis, kafka     string
	duration, warmup time.Duration
	callers          int
	keys, conns      []int64
	systems          []string
	machine          string
	logsDir          string
	scenarios        []string
	runs             int
	steady           bool
	overNames        []string // overshoot: the cases run (async, sync, shards, gubernator)
	overConns        []int64  // overshoot: connections per server
	overDemand       float64  // overshoot: the runs' demand in multiples of L over their 3 s (0: full speed)
	rlqsRuns         int      // rlqs: runs (a minute each) per limit
	profiles         string   // a CPU profile of each velvetrope process per row, here
}

func parse() (options, error) {
	var o options
	var keys, conns, systems, scenarios, overNames, overConns string
	flag.StringVar(&o.bin, "bin", "bin", "directory of velvetrope, service_cmd (envoy ratelimit) and gubernator")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "markdown file whose comparison section is rewritten")
	flag.StringVar(&o.chart, "chart", "docs/bench-compare.png", "PNG chart to write")
	flag.StringVar(&o.redis, "redis", os.Getenv("VELVETROPE_TEST_REDIS"), "Redis host:port (default $VELVETROPE_TEST_REDIS)")
	flag.StringVar(&o.kafka, "kafka", os.Getenv("VELVETROPE_TEST_KAFKA"), "Kafka broker (default $VELVETROPE_TEST_KAFKA)")
	flag.DurationVar(&o.duration, "duration", 8*time.Second, "measured time per row")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured time before each row")
	flag.IntVar(&o.callers, "callers", 64, "concurrent callers")
	flag.StringVar(&keys, "keys", "1,1000,1000000", "key spreads")
	flag.StringVar(&conns, "conns", "4,64", "connection counts")
	flag.StringVar(&systems, "systems", strings.Join(allSystems, ","), "systems to run")
	flag.StringVar(&o.machine, "machine", "", "machine description for the table (default: cores and memory read here)")
	flag.StringVar(&scenarios, "scenarios", "throughput,overshoot,rlqs", "throughput (every system at each key spread and connection count), overshoot (admitted against the limit across 3 instances), rlqs (RLQS clients' admissions against the limit across 3 checkers)")
	flag.IntVar(&o.rlqsRuns, "rlqs-runs", 2, "rlqs: runs per limit (a minute's window each)")
	flag.IntVar(&o.runs, "runs", 5, "overshoot: runs per case")
	flag.BoolVar(&o.steady, "steady", true, "overshoot: also 2 minutes of steady demand at 2 × L a minute")
	flag.StringVar(&overNames, "over-cases", strings.Join(overNames_, ","), "overshoot: the cases to run")
	flag.Float64Var(&o.overDemand, "over-demand", 0, "overshoot: each run's demand, in multiples of L over its 3 s (0: the callers' full speed)")
	flag.StringVar(&overConns, "over-conns", "1,24", "overshoot: connections per server (the 24 callers' load over 1, or over one each)")
	flag.StringVar(&o.profiles, "profiles", "", "write a CPU profile of each velvetrope process (checker, aggregator) over each row's measured time into this directory")
	flag.StringVar(&o.logsDir, "logs", "", "keep the servers' logs in this directory (default: a temporary one, removed)")
	flag.Parse()
	var err error
	if o.keys, err = ints(keys); err != nil {
		return o, fmt.Errorf("--keys: %w", err)
	}
	if o.conns, err = ints(conns); err != nil {
		return o, fmt.Errorf("--conns: %w", err)
	}
	for _, s := range strings.Split(scenarios, ",") {
		if s != "throughput" && s != "overshoot" && s != "rlqs" {
			return o, fmt.Errorf("--scenarios: unknown %q (have throughput, overshoot, rlqs)", s)
		}
		o.scenarios = append(o.scenarios, s)
	}
	for _, s := range strings.Split(overNames, ",") {
		if !contains(overNames_, s) {
			return o, fmt.Errorf("--over-cases: unknown %q (have %s)", s, strings.Join(overNames_, ", "))
		}
		o.overNames = append(o.overNames, s)
	}
	if o.overConns, err = ints(overConns); err != nil {
		return o, fmt.Errorf("--over-conns: %w", err)
	}
	if o.runs < 1 {
		return o, fmt.Errorf("--runs: at least 1")
	}
	for _, s := range strings.Split(systems, ",") {
		if !contains(allSystems, s) {
			return o, fmt.Errorf("--systems: unknown %q (have %s)", s, strings.Join(allSystems, ", "))
		}
		o.systems = append(o.systems, s)
	}
	if o.redis == "" || o.kafka == "" {
		return o, fmt.Errorf("need Redis and Kafka: --redis/--kafka or VELVETROPE_TEST_REDIS/KAFKA (scripts/services.sh up writes them to .services.env)")
	}
	return o, nil
}

func ints(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The systems, in table order.
var allSystems = []string{"ceiling", "envoy", "gubernator", "velvetrope-async", "velvetrope-sync"}

// row is one measurement.
type row struct {
	System string         `json:"system"`
	Conns  int64          `json:"conns"`
	Keys   int64          `json:"keys"`
	Result loadgen.Result `json:"result"`
	// Per decision, where the system exposes it: Redis commands (all
	// systems that use Redis), deltas emitted and store charges
	// (velvetrope), and the checker's resident memory per key requested.
	RedisPerDecision   float64 `json:"redis_commands_per_decision"`
	RedisCPUPer1000    float64 `json:"redis_cpu_ms_per_1000_decisions"`
	DeltasPerDecision  float64 `json:"deltas_per_decision,omitempty"`
	RecordsPerDecision float64 `json:"kafka_records_per_decision,omitempty"` // a record packs a partition's deltas of a flush
	ChargesPerDecision float64 `json:"store_charges_per_decision,omitempty"`
	RSSPerKey          float64 `json:"rss_bytes_per_key,omitempty"`
	// The whole system's cost per 1,000 decisions, in CPU milliseconds:
	// its own processes (service; velvetrope: checker and aggregator),
	// Redis (RedisCPUPer1000) and the Kafka broker, measured until the
	// pipeline took in the row's work. MemPerKey is the growth of its
	// processes' resident memory and of Redis's memory per key the row
	// requested.
	ServiceCPUPer1000 float64 `json:"service_cpu_ms_per_1000_decisions"`
	KafkaCPUPer1000   float64 `json:"kafka_cpu_ms_per_1000_decisions,omitempty"`
	SystemCPUPer1000  float64 `json:"system_cpu_ms_per_1000_decisions"`
	MemPerKey         float64 `json:"system_memory_bytes_per_key,omitempty"`
	// AggScriptsPer1000 is the aggregator's Redis script calls per 1,000
	// deltas it took (one per counter and window of a batch).
	AggScriptsPer1000 float64 `json:"aggregator_scripts_per_1000_deltas,omitempty"`
	// DrainAfter is how long the aggregator took, after the row, to take
	// in what it was sent (reported above 1 s).
	DrainAfter time.Duration `json:"drain_after_ns,omitempty"`
}

func run() error {
	o, err := parse()
	if err != nil {
		return err
	}
	commit() // the tree as it was before this run wrote anything
	dir := o.logsDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "velvetrope-compare-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if o.profiles != "" {
		if err := os.MkdirAll(o.profiles, 0o755); err != nil {
			return err
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: o.redis})
	defer rc.Close()
	if err := rc.Ping(context.Background()).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", o.redis, err)
	}
	if contains(o.scenarios, "throughput") {
		if err := throughput(o, dir, rc); err != nil {
			return err
		}
	}
	if contains(o.scenarios, "overshoot") {
		rep, err := overshoot(o, dir)
		if err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(filepath.Dir(o.out), "bench-overshoot.json"), rep); err != nil {
			return err
		}
		if err := writeOvershoot(o.out, rep); err != nil {
			return err
		}
	}
	if contains(o.scenarios, "rlqs") {
		rep, err := rlqsAccuracy(o, dir)
		if err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(filepath.Dir(o.out), "bench-rlqs.json"), rep); err != nil {
			return err
		}
		return writeRLQS(o.out, rep)
	}
	return nil
}

// throughput runs every system at each key spread and connection count.
// Every system is up for the whole scenario and a cell's rows run one
// after another, the ceiling first: a share of the ceiling compares rows
// of the same minute (this machine's speed drifts by half within a run).
// Each row starts once the machine is quiet (waitQuiet).
func throughput(o options, dir string, rc *redis.Client) error {
	started := time.Now()
	var svs []*served
	defer func() {
		for _, sv := range svs {
			sv.stop()
		}
	}()
	for _, sys := range o.systems {
		sv, err := launch(sys, o, dir)
		if err != nil {
			return err
		}
		svs = append(svs, sv)
	}
	var rows []row
	for _, conns := range o.conns {
		for _, keys := range o.keys {
			for _, sv := range svs {
				if d := waitQuiet(30 * time.Second); d > time.Second {
					fmt.Fprintf(os.Stderr, "compare: %s\n", quietNote(d))
				}
				r, err := measure(o, sv, rc, conns, keys)
				if err != nil {
					return fmt.Errorf("%s, %d connections, %d keys: %w", sv.name, conns, keys, err)
				}
				fmt.Fprintf(os.Stderr, "compare: %-17s conns %-3d keys %-8d %8.0f req/s  p99 %6.2f ms  redis/decision %.2f  deltas/decision %.3f\n",
					sv.name, conns, keys, r.Result.PerSecond, float64(r.Result.P99)/1e6, r.RedisPerDecision, r.DeltasPerDecision)
				rows = append(rows, r)
			}
		}
	}
	// the tables list a system's rows together, in the order of --systems
	order := map[string]int{}
	for i, sys := range o.systems {
		order[sys] = i
	}
	sort.SliceStable(rows, func(i, j int) bool { return order[rows[i].System] < order[rows[j].System] })
	rep := report{Rows: rows, Started: started, Took: time.Since(started), Commit: commit(), Machine: o.machine,
		Duration: o.duration, Warmup: o.warmup, Callers: o.callers}
	if rep.Machine == "" {
		rep.Machine = machine()
	}
	if err := writeJSON(filepath.Join(filepath.Dir(o.out), "bench-compare.json"), rep); err != nil {
		return err
	}
	if err := writeChart(o.chart, rep); err != nil {
		return err
	}
	return writeMarkdown(o.out, rep, filepath.Base(o.chart))
}

// measure runs one row: `velvetrope bench` as its own process.
func measure(o options, sv *served, rc *redis.Client, conns, keys int64) (row, error) {
	ctx := context.Background()
	before := sv.counters(ctx, rc)
	args := []string{"bench", "--json", "--quiet", "--addr", sv.addr, "--protocol", string(sv.protocol), "--domain", sv.domain,
		"--callers", strconv.Itoa(o.callers), "--conns", strconv.FormatInt(conns, 10), "--keys", strconv.FormatInt(keys, 10),
		"--duration", o.duration.String(), "--warmup", o.warmup.String(), "--label", sv.name}
	profiled := sv.profile(o, conns, keys)
	out, err := exec.Command(filepath.Join(o.bin, "velvetrope"), args...).Output()
	if perr := profiled(); perr != nil {
		fmt.Fprintf(os.Stderr, "compare: %v\n", perr)
	}
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + strings.TrimSpace(string(ee.Stderr))
		}
		return row{}, fmt.Errorf("velvetrope bench: %s", msg)
	}
	var res struct{ loadgen.Result }
	if err := json.Unmarshal(out, &res); err != nil {
		return row{}, fmt.Errorf("velvetrope bench answer: %w", err)
	}
	r := row{System: sv.name, Conns: conns, Keys: keys, Result: res.Result}
	// the next row starts once the pipeline has taken in this one's
	// deltas: a row never pays for the backlog of the one before, and
	// pays for its own (the counters are read after it)
	if backlog := sv.settle(); backlog > time.Second {
		r.DrainAfter = backlog
	}
	after := sv.counters(ctx, rc)
	// the counters cover warm-up and measurement: per decision of both
	decisions := after.decisions - before.decisions
	if decisions <= 0 { // a peer that does not say: the requests of warm-up and measurement, estimated
		decisions = float64(res.Requests) * float64(o.duration+o.warmup) / float64(o.duration)
	}
	if sv.usesRedis {
		r.RedisPerDecision = (after.redis - before.redis) / decisions
		r.RedisCPUPer1000 = (after.redisCPU - before.redisCPU) * 1e3 * 1e3 / decisions
	}
	r.ServiceCPUPer1000 = (after.svcCPU - before.svcCPU) * 1e3 * 1e3 / decisions
	r.KafkaCPUPer1000 = (after.kafkaCPU - before.kafkaCPU) * 1e3 * 1e3 / decisions
	r.SystemCPUPer1000 = r.ServiceCPUPer1000 + r.RedisCPUPer1000 + r.KafkaCPUPer1000
	// the keys the row requested: the load takes its spread's keys in turn,
	// new ones every row (a velvetrope key decided only on its first-touch
	// allowance is held until its window ends, so what it tracks at the end
	// is fewer than it decided)
	added := min(float64(keys), decisions)
	if added >= 1000 {
		r.MemPerKey = (after.svcRSS - before.svcRSS + after.redisMem - before.redisMem) / added
	}
	if sv.metrics != "" {
		r.DeltasPerDecision = (after.deltas - before.deltas) / decisions
		r.RecordsPerDecision = (after.records - before.records) / decisions
		r.ChargesPerDecision = (after.charges - before.charges) / decisions
		if d := after.aggDeltas - before.aggDeltas; d > 0 {
			r.AggScriptsPer1000 = (after.aggScripts - before.aggScripts) * 1000 / d
		}
		if added > 1000 {
			r.RSSPerKey = (after.rss - before.rss) / added
		}
	}
	return r, nil
}

// commit is the repository's HEAD (with -dirty for uncommitted changes),
// read once: the run rewrites docs/benchmarks.md itself, and a later section
// would otherwise call its own tree dirty.
var commit = sync.OnceValue(func() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
})

// machine describes the cores and memory this runs on.
func machine() string {
	cores := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cores = strings.Count(string(b), "\nprocessor")
		if strings.HasPrefix(string(b), "processor") {
			cores++
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				mem = fmt.Sprintf(", %d GiB", (kb+(1<<19))>>20)
			}
		}
	}
	return fmt.Sprintf("%d cores%s, shared by the load generator, the servers, Redis and Kafka", cores, mem)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
