// Package metrics exposes counters and gauges in the Prometheus text
// format (version 0.0.4) without a client library: each metric reads its
// value from a function when scraped, so the code that counts keeps its
// own atomic counters and pays nothing on the request path.
package metrics

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// Registry holds named metrics. Safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	metrics map[string]metric
}

type metric struct {
	help, kind string
	value      func() float64
	label      string
	values     func() map[string]float64
}

// New returns an empty registry.
func New() *Registry { return &Registry{metrics: map[string]metric{}} }

// Counter registers a monotonic counter read from value. Names must start
// with "velvetrope_" and be unique; a second registration replaces the first.
func (r *Registry) Counter(name, help string, value func() float64) {
	r.add(name, help, "counter", value)
}

// Gauge registers a gauge read from value.
func (r *Registry) Gauge(name, help string, value func() float64) { r.add(name, help, "gauge", value) }

func (r *Registry) add(name, help, kind string, value func() float64) {
	if !strings.HasPrefix(name, "velvetrope_") {
		panic(fmt.Sprintf("metrics: %q: names start with velvetrope_", name)) // a programming error, caught by tests
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics[name] = metric{help: help, kind: kind, value: value}
}

// ServeHTTP writes every metric, sorted by name.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	names := make([]string, 0, len(r.metrics))
	for n := range r.metrics {
		names = append(names, n)
	}
	ms := make([]metric, len(names))
	sort.Strings(names)
	for i, n := range names {
		ms[i] = r.metrics[n]
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var b strings.Builder
	for i, n := range names {
		m := ms[i]
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", n, m.help, n, m.kind)
		if m.values == nil {
			fmt.Fprintf(&b, "%s %g\n", n, m.value())
			continue
		}
		vals := m.values()
		keys := make([]string, 0, len(vals))
		for k := range vals {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s{%s=\"%s\"} %g\n", n, m.label, escape(k), vals[k])
		}
	}
	_, _ = w.Write([]byte(b.String()))
}

// Labeled registers a metric with one label, its values read from values
// (label value → sample) when scraped.
func (r *Registry) Labeled(name, help, kind, label string, values func() map[string]float64) {
	if kind != "counter" && kind != "gauge" {
		panic("metrics: kind must be counter or gauge")
	}
	r.add(name, help, kind, nil)
	r.mu.Lock()
	m := r.metrics[name]
	m.label, m.values = label, values
	r.metrics[name] = m
	r.mu.Unlock()
}

// escape quotes a label value.
func escape(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}
