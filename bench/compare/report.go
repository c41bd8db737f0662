package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"
)

// report is one whole comparison run.
type report struct {
	Rows     []row         `json:"rows"`
	Started  time.Time     `json:"started"`
	Took     time.Duration `json:"took_ns"`
	Commit   string        `json:"commit"`
	Machine  string        `json:"machine"`
	Duration time.Duration `json:"row_duration_ns"`
	Warmup   time.Duration `json:"row_warmup_ns"`
	Callers  int           `json:"callers"`
}

// find returns the row of sys at (conns, keys), or nil.
func (r *report) find(sys string, conns, keys int64) *row {
	for i := range r.Rows {
		if x := &r.Rows[i]; x.System == sys && x.Conns == conns && x.Keys == keys {
			return x
		}
	}
	return nil
}

// axes lists the systems, connection counts and key spreads present, in
// order of first appearance.
func (r *report) axes() (systems []string, conns, keys []int64) {
	for _, x := range r.Rows {
		if !contains(systems, x.System) {
			systems = append(systems, x.System)
		}
		if !containsInt(conns, x.Conns) {
			conns = append(conns, x.Conns)
		}
		if !containsInt(keys, x.Keys) {
			keys = append(keys, x.Keys)
		}
	}
	return systems, conns, keys
}

func containsInt(list []int64, v int64) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// Labels of the systems in the tables.
var labels = map[string]string{
	"ceiling":          "ceiling (no-op server)",
	"envoy":            "envoy ratelimit (Redis per call)",
	"gubernator":       "gubernator (1 node, in memory)",
	"velvetrope-async": "velvetrope checker, async",
	"velvetrope-sync":  "velvetrope `mode: sync`",
}

func label(sys string) string {
	if l, ok := labels[sys]; ok {
		return l
	}
	return sys
}

// thousands formats n with comma separators.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

const (
	beginMark = "<!-- bench-compare: begin (written by make bench-compare; edits between the marks are lost) -->"
	endMark   = "<!-- bench-compare: end -->"
)

// markdown is the comparison section.
func (r *report) markdown(chart string) string {
	var b bytes.Buffer
	systems, conns, keys := r.axes()
	fmt.Fprintf(&b, "%s\n## Side by side: velvetrope, envoy's ratelimit, gubernator\n\n", beginMark)
	fmt.Fprintf(&b, "Measured %s on %s, commit `%s`, by `make bench-compare` (the whole run took %s). "+
		"Closed-loop gRPC load from `velvetrope bench`, %d callers, %s per row after %s of warm-up, limits far above the load "+
		"(every answer is OK, so the figures are the cost of deciding). Every server is its own process; **the load generator "+
		"shares the cores with the servers, Redis and Kafka**. The ceiling is velvetrope's own gRPC front over a checker that "+
		"admits everything: what answering costs here, without deciding. Every system runs for the whole "+
		"scenario and a cell's rows are measured one after another, the ceiling first, each once the machine is quiet, so a "+
		"share compares rows of the same minute; this machine's speed still drifts between rows, and a share above 100 %% is "+
		"that drift. Each cell: requests/s (p99), and the share of the ceiling's requests/s in the same column.\n\n",
		r.Started.UTC().Format("2006-01-02"), r.Machine, r.Commit, r.Took.Round(time.Second), r.Callers, r.Duration, r.Warmup)
	for _, c := range conns {
		fmt.Fprintf(&b, "%d callers over **%d connection(s)**:\n\n| requests/s (p99) |", r.Callers, c)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s key(s) |", thousands(k))
		}
		b.WriteString("\n|---|")
		for range keys {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		for _, s := range systems {
			fmt.Fprintf(&b, "| %s |", label(s))
			for _, k := range keys {
				x := r.find(s, c, k)
				if x == nil {
					b.WriteString(" — |")
					continue
				}
				cell := fmt.Sprintf(" %s (%.1f ms)", thousands(int64(x.Result.PerSecond+0.5)), float64(x.Result.P99)/1e6)
				if ceil := r.find("ceiling", c, k); ceil != nil && s != "ceiling" && ceil.Result.PerSecond > 0 {
					cell += fmt.Sprintf(" = %.0f %%", 100*x.Result.PerSecond/ceil.Result.PerSecond)
				}
				if x.Result.Errors > 0 {
					cell += fmt.Sprintf(", %d errors", x.Result.Errors)
				}
				if x.DrainAfter > 0 {
					cell += fmt.Sprintf(", backlog drained in %s", x.DrainAfter.Round(time.Second))
				}
				b.WriteString(cell + " |")
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("Work per decision in the same rows (from Redis `INFO commandstats` and the checker's `/metrics`, " +
		"warm-up included; resident memory growth of the checker per key the row requested):\n\n" +
		"| system | connections | keys | Redis commands / decision | Redis CPU ms / 1,000 decisions | deltas / decision | Kafka records / decision | store charges / decision | aggregator scripts / 1,000 deltas | RSS / key |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Rows {
		if x.RedisPerDecision == 0 && x.DeltasPerDecision == 0 {
			continue
		}
		rss := "—"
		if x.RSSPerKey > 0 {
			rss = fmt.Sprintf("%.0f B", x.RSSPerKey)
		}
		deltas, records, charges, scripts := "—", "—", "—", "—"
		if strings.HasPrefix(x.System, "velvetrope") {
			deltas, charges = fmt.Sprintf("%.3f", x.DeltasPerDecision), fmt.Sprintf("%.3f", x.ChargesPerDecision)
			records = fmt.Sprintf("%.4f", x.RecordsPerDecision)
			scripts = fmt.Sprintf("%.0f", x.AggScriptsPer1000)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.2f | %.1f | %s | %s | %s | %s | %s |\n", label(x.System), x.Conns, thousands(x.Keys), x.RedisPerDecision,
			x.RedisCPUPer1000, deltas, records, charges, scripts, rss)
	}
	b.WriteString("\nThe whole system's cost in the same rows, what a front pays for: CPU milliseconds per 1,000 decisions of " +
		"every process of the system (velvetrope: checker and aggregator; envoy: its service; gubernator: its process), of " +
		"Redis (`INFO cpu`) and of the Kafka broker (`/proc/<pid>/stat`), read once the pipeline took in the row's work; the " +
		"load generator is not counted. Memory: growth of the system's processes' resident memory and of Redis's " +
		"`used_memory` per key the row requested (its distinct keys: the load takes them in turn, new ones every row).\n\n" +
		"| system | connections | keys | CPU ms / 1,000 decisions | of it: service | Redis | Kafka | memory / key |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Rows {
		if x.System == "ceiling" {
			continue
		}
		mem := "—"
		if x.MemPerKey > 0 {
			mem = fmt.Sprintf("%.0f B", x.MemPerKey)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.1f | %.1f | %.1f | %.1f | %s |\n", label(x.System), x.Conns, thousands(x.Keys),
			x.SystemCPUPer1000, x.ServiceCPUPer1000, x.RedisCPUPer1000, x.KafkaCPUPer1000, mem)
	}
	fmt.Fprintf(&b, "\n![requests/s, p99 and whole-system CPU per system and key spread](%s)\n\nReproduce: `make bench-compare` "+
		"(installs the peers into `bin/` with `go install`, starts Redis and Kafka with `scripts/services.sh`, runs every row, "+
		"rewrites this section, `bench-compare.json` beside it and the chart). One row by hand: `velvetrope bench --addr HOST:PORT "+
		"--conns 4 --keys 1000 --duration 8s`.\n%s\n", chart, endMark)
	return b.String()
}

// writeMarkdown replaces the comparison section of path (appending it
// when the marks are absent).
func writeMarkdown(path string, r report, chart string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	section := r.markdown(chart)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + section + strings.TrimPrefix(s[j+len(endMark):], "\n")
	case i >= 0 || j >= 0:
		return fmt.Errorf("%s: only one of the comparison marks is present; fix the file by hand", path)
	default:
		s = strings.TrimRight(s, "\n") + "\n\n" + section
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
