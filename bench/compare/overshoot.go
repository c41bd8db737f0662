package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/bench/loadgen"
)

// The overshoot scenario: one key, a per-minute limit L, 24 callers spread
// round-robin over 3 servers (on 1 connection per server, and on a
// connection each: --over-conns), 3 s at full speed, admitted against L —
// velvetrope in both near_limit modes (and a hot key with shards: 4) on 3
// checkers and an aggregator, gubernator GLOBAL on 3 nodes; each case
// several times (median and range). Then a steady demand of 2 × L per
// minute, evenly over the 3 checkers, for 2 minutes: what each window
// admits.

// overCase is one configuration measured.
type overCase struct {
	Name   string  `json:"name"`
	Limit  int64   `json:"limit"`
	Conns  int64   `json:"conns"`    // connections per server the 24 callers share
	Runs   []int64 `json:"admitted"` // admitted per run
	Median int64   `json:"median"`
	// StoreCalls counts the checkers' store charges during the runs (for
	// near_limit: async: none should be made).
	StoreCalls float64 `json:"store_calls"`
	Requests   uint64  `json:"requests"` // in all runs
}

// overReport is the scenario's result.
type overReport struct {
	Cases   []overCase    `json:"cases"`
	Steady  []int64       `json:"steady_windows,omitempty"` // admitted per minute window, L = 1,000
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took_ns"`
	Commit  string        `json:"commit"`
	Runs    int           `json:"runs"`
}

var overLimits = []int64{1000, 10000}

// overNames_ are the overshoot's cases, in table order.
var overNames_ = []string{"async", "sync", "shards", "gubernator"}

// overRules are the checkers' rules: one descriptor key per case and limit.
func overRules() string {
	var b strings.Builder
	b.WriteString("domain: over\ndescriptors:\n")
	for _, l := range overLimits {
		fmt.Fprintf(&b, "  - key: async_%d\n    algorithm: fixed_window\n    near_limit: async\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", l, l)
		fmt.Fprintf(&b, "  - key: sync_%d\n    algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", l, l)
		fmt.Fprintf(&b, "  - key: shards_%d\n    algorithm: fixed_window\n    shards: 4\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", l, l)
	}
	return b.String()
}

// overFleet is three checkers and an aggregator, or three gubernators.
type overFleet struct {
	procs   []*proc
	addrs   []string
	metrics []string
}

func (f *overFleet) stop() {
	for i := len(f.procs) - 1; i >= 0; i-- {
		f.procs[i].stop()
	}
}

// storeCalls sums the checkers' store charges.
func (f *overFleet) storeCalls() float64 {
	var n float64
	for _, m := range f.metrics {
		n += max(metric(m, "velvetrope_checker_store_charges_total"), 0)
	}
	return n
}

func launchVelvetropeFleet(o options, dir string) (*overFleet, error) {
	rulesPath := filepath.Join(dir, "over-rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(overRules()), 0o644); err != nil {
		return nil, err
	}
	quotaPath := filepath.Join(dir, "quota-rules.yaml") // the RLQS scenario's
	if err := os.WriteFile(quotaPath, []byte(rlqsRules()), 0o644); err != nil {
		return nil, err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	cfgPath := filepath.Join(dir, "over-config.yaml")
	cfg := fmt.Sprintf("kafka:\n  topic: velvetrope.over.%s\naggregator:\n  group: velvetrope-over-%s\n", run, run)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	env := []string{"VELVETROPE_REDIS_ADDRS=" + o.redis, "VELVETROPE_KAFKA_BROKERS=" + o.kafka, "VELVETROPE_CLICKHOUSE_ADDR="}
	bin := filepath.Join(o.bin, "velvetrope")
	f := &overFleet{}
	aggHTTP := freeAddr()
	a, err := start(dir, "over-aggregator", bin, []string{"aggregator", "--config", cfgPath, "--http", aggHTTP},
		append(env, "VELVETROPE_INSTANCE_ID=over-aggregator"))
	if err != nil {
		return nil, err
	}
	f.procs = append(f.procs, a)
	for i := range 3 {
		g, h := freeAddr(), freeAddr()
		name := fmt.Sprintf("over-checker-%d", i)
		c, err := start(dir, name, bin, []string{"checker", "--config", cfgPath, "--rules", rulesPath + "," + quotaPath, "--grpc", g, "--http", h},
			append(env, "VELVETROPE_INSTANCE_ID="+name, "VELVETROPE_STATE_DIR="+filepath.Join(dir, name+"-state")))
		if err != nil {
			f.stop()
			return nil, err
		}
		f.procs, f.addrs, f.metrics = append(f.procs, c), append(f.addrs, g), append(f.metrics, "http://"+h+"/metrics")
		if err := waitHTTP(c, "http://"+h+"/readyz"); err != nil {
			f.stop()
			return nil, err
		}
	}
	if err := waitHTTP(a, "http://"+aggHTTP+"/readyz"); err != nil {
		f.stop()
		return nil, err
	}
	// every checker knows the other two from the registry
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		all := true
		for _, m := range f.metrics {
			if metric(m, "velvetrope_checker_live_instances") != 3 {
				all = false
			}
		}
		if all {
			return f, nil
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("the 3 checkers did not see each other in the registry within 30 s")
		}
	}
}

// launchGubernators runs a 3-node gubernator cluster (member list). Its
// member list names nodes by host name and its peer table keys them by
// IP, so each node runs in a UTS namespace of its own (`unshare --uts`,
// its own host name) on its own loopback address (127.0.0.1 to .3).
func launchGubernators(o options, dir string) (*overFleet, error) {
	f := &overFleet{}
	var https []string
	first := ""
	for i := range 3 {
		at := func() string { // a free port, on node i's loopback address
			_, port, _ := strings.Cut(freeAddr(), ":")
			return fmt.Sprintf("127.0.0.%d:%s", i+1, port)
		}
		g, h, ml := at(), at(), at()
		if first == "" {
			first = ml
		}
		bin, err := filepath.Abs(filepath.Join(o.bin, "gubernator"))
		if err != nil {
			return nil, err
		}
		p, err := start(dir, fmt.Sprintf("gubernator-%d", i), "unshare",
			[]string{"--uts", "sh", "-c", fmt.Sprintf("hostname gubernator-%d && exec %s", i, bin)}, []string{
				"GUBER_GRPC_ADDRESS=" + g, "GUBER_HTTP_ADDRESS=" + h, "GUBER_ADVERTISE_ADDRESS=" + g,
				"GUBER_PEER_DISCOVERY_TYPE=member-list", "GUBER_MEMBERLIST_BIND_ADDRESS=" + ml, "GUBER_MEMBERLIST_ADDRESS=" + ml,
				"GUBER_MEMBERLIST_KNOWN_NODES=" + first, "GUBER_LOG_LEVEL=warn", fmt.Sprintf("GUBER_INSTANCE_ID=over-%d", i),
				"OTEL_TRACES_EXPORTER=none"})
		if err != nil {
			f.stop()
			return nil, err
		}
		f.procs, f.addrs, https = append(f.procs, p), append(f.addrs, g), append(https, h)
	}
	// every node sees three peers
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		all := true
		for _, h := range https {
			var hc struct {
				PeerCount int `json:"peer_count"`
			}
			r, err := http.Get("http://" + h + "/v1/HealthCheck")
			if err == nil {
				json.NewDecoder(r.Body).Decode(&hc)
				r.Body.Close()
			}
			if hc.PeerCount != 3 {
				all = false
			}
		}
		if all {
			return f, nil
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("the 3 gubernator nodes did not find each other within 60 s; log:\n%s", f.procs[0].tail())
		}
	}
}

// minuteSafe waits until a run of d starting now stays inside one minute.
func minuteSafe(d time.Duration) {
	now := time.Now()
	if next := now.Truncate(time.Minute).Add(time.Minute); now.Add(d + 500*time.Millisecond).After(next) {
		time.Sleep(time.Until(next.Add(200 * time.Millisecond)))
	}
}

// overRun is one 3 s run at a fresh key, its 24 callers over conns
// connections per server (8 callers a server: 8 and more is one each).
func overRun(addrs []string, proto loadgen.Protocol, key string, limit, conns int64, demand float64) (loadgen.Result, error) {
	minuteSafe(3 * time.Second)
	cfg := loadgen.Config{Targets: addrs, Protocol: proto, Callers: 24, Conns: int(conns), Duration: 3 * time.Second, Warmup: -1,
		Keys: 1, KeyPrefix: "r" + strconv.FormatInt(time.Now().UnixNano(), 36), Domain: "over", DescriptorKey: key,
		Rate: demand * float64(limit) / 3}
	if proto == loadgen.Gubernator {
		cfg.Limit, cfg.LimitEvery, cfg.Global = limit, time.Minute, true
	}
	return loadgen.Run(context.Background(), cfg)
}

// overshoot runs the scenario.
func overshoot(o options, dir string) (overReport, error) {
	rep := overReport{Started: time.Now(), Commit: commit(), Runs: o.runs}
	fl, err := launchVelvetropeFleet(o, dir)
	if err != nil {
		return rep, err
	}
	for _, name := range []string{"async", "sync", "shards"} {
		if !contains(o.overNames, name) {
			continue
		}
		for _, conns := range o.overConns {
			for _, l := range overLimits {
				c := overCase{Name: name, Limit: l, Conns: conns}
				before := fl.storeCalls()
				for i := range o.runs {
					res, err := overRun(fl.addrs, loadgen.Envoy, fmt.Sprintf("%s_%d", name, l), l, conns, o.overDemand)
					if err != nil {
						fl.stop()
						return rep, fmt.Errorf("velvetrope %s L=%d conns %d run %d: %w", name, l, conns, i, err)
					}
					c.Runs, c.Requests = append(c.Runs, int64(res.Admitted)), c.Requests+res.Requests
					fmt.Fprintf(os.Stderr, "overshoot: velvetrope %-6s L=%-6d conns %-2d run %d: admitted %d of %d requests (%+.1f %%)\n",
						name, l, conns, i, res.Admitted, res.Requests, 100*float64(int64(res.Admitted)-l)/float64(l))
				}
				c.StoreCalls = fl.storeCalls() - before
				c.Median = median(c.Runs)
				rep.Cases = append(rep.Cases, c)
			}
		}
	}
	if o.steady {
		// 2 × L a minute, evenly over the 3 checkers, from a minute's start
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 50*time.Millisecond)))
		res, err := loadgen.Run(context.Background(), loadgen.Config{Targets: fl.addrs, Callers: 3, Conns: 1,
			Duration: 2 * time.Minute, Warmup: -1, Keys: 1, KeyPrefix: "steady" + strconv.FormatInt(time.Now().UnixNano(), 36),
			Domain: "over", DescriptorKey: "async_1000", Rate: 2 * 1000 / 60.0})
		if err != nil {
			fl.stop()
			return rep, fmt.Errorf("steady demand: %w", err)
		}
		for w := range 2 {
			var n uint64
			for s := w * 60; s < (w+1)*60 && s < len(res.AdmittedPerSecond); s++ {
				n += res.AdmittedPerSecond[s]
			}
			rep.Steady = append(rep.Steady, int64(n))
		}
		fmt.Fprintf(os.Stderr, "overshoot: steady 2×L/min over 3 checkers, L=1000: windows admitted %v\n", rep.Steady)
	}
	fl.stop()
	if !contains(o.overNames, "gubernator") {
		rep.Took = time.Since(rep.Started)
		return rep, nil
	}
	gf, err := launchGubernators(o, dir)
	if err != nil {
		return rep, err
	}
	defer gf.stop()
	for _, conns := range o.overConns {
		for _, l := range overLimits {
			c := overCase{Name: "gubernator", Limit: l, Conns: conns}
			for i := range o.runs {
				res, err := overRun(gf.addrs, loadgen.Gubernator, fmt.Sprintf("over_%d", l), l, conns, o.overDemand)
				if err != nil {
					return rep, fmt.Errorf("gubernator L=%d conns %d run %d: %w", l, conns, i, err)
				}
				c.Runs, c.Requests = append(c.Runs, int64(res.Admitted)), c.Requests+res.Requests
				fmt.Fprintf(os.Stderr, "overshoot: gubernator GLOBAL L=%-6d conns %-2d run %d: admitted %d of %d requests (%+.1f %%)\n",
					l, conns, i, res.Admitted, res.Requests, 100*float64(int64(res.Admitted)-l)/float64(l))
			}
			c.Median = median(c.Runs)
			rep.Cases = append(rep.Cases, c)
		}
	}
	rep.Took = time.Since(rep.Started)
	return rep, nil
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

const (
	overBegin = "<!-- bench-compare overshoot: begin (written by make bench-compare; edits between the marks are lost) -->"
	overEnd   = "<!-- bench-compare overshoot: end -->"
)

var overLabels = map[string]string{
	"async":      "velvetrope `near_limit: async`",
	"sync":       "velvetrope `near_limit: sync` (default)",
	"shards":     "velvetrope `near_limit: sync`, `shards: 4`",
	"gubernator": "gubernator GLOBAL (3 nodes)",
}

func (r *overReport) find(name string, l, conns int64) *overCase {
	for i := range r.Cases {
		if r.Cases[i].Name == name && r.Cases[i].Limit == l && r.Cases[i].Conns == conns {
			return &r.Cases[i]
		}
	}
	return nil
}

// markdown is the overshoot section.
func (r *overReport) markdown() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n## Overshoot across instances\n\nMeasured %s, commit `%s`, by `make bench-compare` (%s): one key with a "+
		"per-minute limit L, 24 callers spread round-robin over 3 servers (on one connection per server, or a connection each), 3 s at full speed, %d runs per cell (each at a fresh key, "+
		"inside one minute); velvetrope on 3 checkers and an aggregator with the real Kafka and Redis, gubernator GLOBAL on 3 nodes. "+
		"Each cell: admitted against L, the median of the runs and their range (every run in brackets). Everything shares the 2 cores.\n\n",
		overBegin, r.Started.UTC().Format("2006-01-02"), r.Commit, r.Took.Round(time.Second), r.Runs)
	b.WriteString("| admitted vs L |")
	for _, l := range overLimits {
		fmt.Fprintf(&b, " L = %s |", thousands(l))
	}
	b.WriteString("\n|---|")
	for range overLimits {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	pct := func(v, l int64) string { return fmt.Sprintf("%+.1f %%", 100*float64(v-l)/float64(l)) }
	var conns []int64
	for _, c := range r.Cases {
		if !slices.Contains(conns, c.Conns) {
			conns = append(conns, c.Conns)
		}
	}
	slices.Sort(conns)
	for _, name := range overNames_ {
		for _, cn := range conns {
			if r.find(name, overLimits[0], cn) == nil && r.find(name, overLimits[1], cn) == nil {
				continue
			}
			label := overLabels[name] + ", 1 connection per server"
			if cn > 1 {
				label = overLabels[name] + ", a connection per caller"
			}
			fmt.Fprintf(&b, "| %s |", label)
			for _, l := range overLimits {
				c := r.find(name, l, cn)
				if c == nil {
					b.WriteString(" — |")
					continue
				}
				lo, hi := slices.Min(c.Runs), slices.Max(c.Runs)
				var all []string
				for _, v := range c.Runs {
					all = append(all, thousands(v))
				}
				fmt.Fprintf(&b, " median %s (%s), %s to %s [%s]", thousands(c.Median), pct(c.Median, l), pct(lo, l), pct(hi, l), strings.Join(all, ", "))
				if name != "gubernator" {
					fmt.Fprintf(&b, "; %.0f store calls", c.StoreCalls)
				}
				b.WriteString(" |")
			}
			b.WriteString("\n")
		}
	}
	if len(r.Steady) > 0 {
		fmt.Fprintf(&b, "\nSteady demand of 2 × L per minute (L = 1,000, `near_limit: async`), evenly over the 3 checkers, for 2 minutes from a "+
			"minute's start: the windows admitted %s.\n", joinInts(r.Steady))
	}
	fmt.Fprintf(&b, "\nStore calls are the checkers' store charges during the runs: `near_limit: async` makes none. Gubernator's token bucket "+
		"refills during the 3 s, so its own bound is L × (1 + 3/60).\n%s\n", overEnd)
	return b.String()
}

func joinInts(v []int64) string {
	var s []string
	for _, x := range v {
		s = append(s, thousands(x))
	}
	return strings.Join(s, " and ")
}

// writeOvershoot replaces the overshoot section of path (appending it when
// the marks are absent).
func writeOvershoot(path string, r overReport) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	section := r.markdown()
	i, j := strings.Index(s, overBegin), strings.Index(s, overEnd)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + section + strings.TrimPrefix(s[j+len(overEnd):], "\n")
	case i >= 0 || j >= 0:
		return fmt.Errorf("%s: only one of the overshoot marks is present; fix the file by hand", path)
	default:
		s = strings.TrimRight(s, "\n") + "\n\n" + section
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
