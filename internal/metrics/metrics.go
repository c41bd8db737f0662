// Package metrics exposes velvetrope's counters and gauges through the
// Prometheus client library (client_golang). Every metric reads its value
// from a function when scraped, so the code that counts keeps its own
// atomic counters and pays nothing on the request path. Only velvetrope_
// metrics are registered: no Go runtime or process collectors, so every
// name a process exposes starts with velvetrope_.
package metrics

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/velvetrope/velvetrope/internal/hist"
)

// Registry holds named metrics. Safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	reg     *prometheus.Registry
	byName  map[string]entry
	handler http.Handler
}

// entry is a registered metric and the line [Registry.Described] gives it.
type entry struct {
	c    prometheus.Collector
	line string
}

// New returns an empty registry.
func New() *Registry {
	reg := prometheus.NewRegistry()
	return &Registry{reg: reg, byName: map[string]entry{},
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})}
}

// Counter registers a monotonic counter read from value. Names must start
// with "velvetrope_" and be unique; a second registration replaces the first.
func (r *Registry) Counter(name, help string, value func() float64) {
	r.add(name, help, "counter", nil, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, value))
}

// Gauge registers a gauge read from value.
func (r *Registry) Gauge(name, help string, value func() float64) {
	r.add(name, help, "gauge", nil, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value))
}

// Labeled registers a metric with one label, its values read from values
// (label value → sample) when scraped. kind is "counter" or "gauge".
func (r *Registry) Labeled(name, help, kind, label string, values func() map[string]float64) {
	vt := prometheus.CounterValue
	switch kind {
	case "counter":
	case "gauge":
		vt = prometheus.GaugeValue
	default:
		panic("metrics: kind must be counter or gauge") // a programming error, caught by tests
	}
	r.add(name, help, kind, []string{label}, &labeled{desc: prometheus.NewDesc(name, help, []string{label}, nil), kind: vt, values: values})
}

// Sample is one series of a multi-label metric: label values in the order
// the metric declared its labels.
type Sample struct {
	Labels []string
	Value  float64
}

// Multi registers a metric with several labels, its series read from
// samples when scraped. kind is "counter" or "gauge".
func (r *Registry) Multi(name, help, kind string, labels []string, samples func() []Sample) {
	vt := prometheus.CounterValue
	switch kind {
	case "counter":
	case "gauge":
		vt = prometheus.GaugeValue
	default:
		panic("metrics: kind must be counter or gauge") // a programming error, caught by tests
	}
	r.add(name, help, kind, labels, &multi{desc: prometheus.NewDesc(name, help, labels, nil), kind: vt, samples: samples})
}

func (r *Registry) add(name, help, kind string, labels []string, c prometheus.Collector) {
	if !strings.HasPrefix(name, "velvetrope_") {
		panic(fmt.Sprintf("metrics: %q: names start with velvetrope_", name)) // a programming error, caught by tests
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byName[name]; ok {
		r.reg.Unregister(old.c)
	}
	r.reg.MustRegister(c)
	r.byName[name] = entry{c: c, line: fmt.Sprintf("%s %s {%s} %s", name, kind, strings.Join(labels, ","), help)}
}

// Described lists every metric registered, one line each, sorted:
// "name kind {labels} help". It is what a scrape can show, whether or not
// a metric has a sample yet (a labeled one with no series has none), so
// that a test can hold a process's metrics to a list.
func (r *Registry) Described() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.byName))
	for _, e := range r.byName {
		out = append(out, e.line)
	}
	slices.Sort(out)
	return out
}

// ServeHTTP writes every metric in the format the scraper asks for (the
// text format by default).
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.handler.ServeHTTP(w, req) }

// labeled is a collector of one metric with one label, read when scraped.
type labeled struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	values func() map[string]float64
}

func (l *labeled) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

func (l *labeled) Collect(ch chan<- prometheus.Metric) {
	for v, x := range l.values() {
		m, err := prometheus.NewConstMetric(l.desc, l.kind, x, v)
		if err != nil { // e.g. a label value that is not UTF-8: reported, never a panic
			m = prometheus.NewInvalidMetric(l.desc, err)
		}
		ch <- m
	}
}

// multi is a collector of one metric with several labels.
type multi struct {
	desc    *prometheus.Desc
	kind    prometheus.ValueType
	samples func() []Sample
}

func (m *multi) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

func (m *multi) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.samples() {
		pm, err := prometheus.NewConstMetric(m.desc, m.kind, s.Value, s.Labels...)
		if err != nil {
			pm = prometheus.NewInvalidMetric(m.desc, err)
		}
		ch <- pm
	}
}

// Histogram registers a histogram in seconds read from h when scraped.
func (r *Registry) Histogram(name, help string, h *hist.Histogram) {
	r.add(name, help, "histogram", nil, &histogram{desc: prometheus.NewDesc(name, help, nil, nil), h: h})
}

type histogram struct {
	desc *prometheus.Desc
	h    *hist.Histogram
}

func (x *histogram) Describe(ch chan<- *prometheus.Desc) { ch <- x.desc }

func (x *histogram) Collect(ch chan<- prometheus.Metric) {
	s := x.h.Snapshot()
	buckets := make(map[float64]uint64, len(s.Cumulative))
	for i, b := range hist.Bounds {
		buckets[b.Seconds()] = s.Cumulative[i]
	}
	m, err := prometheus.NewConstHistogram(x.desc, s.Count, s.SumSeconds, buckets)
	if err != nil {
		m = prometheus.NewInvalidMetric(x.desc, err)
	}
	ch <- m
}
