package sink

import "time"

// MetricsRegistry is where the sink's RegisterMetrics methods put their
// metrics (the velvetrope binary's Prometheus registry). Each metric reads
// its value from the function given when it is scraped.
type MetricsRegistry interface {
	Counter(name, help string, value func() float64)
	Gauge(name, help string, value func() float64)
}

// RegisterMetrics exposes the writer's buffer and writes as
// velvetrope_sink_* metrics on reg.
func (w *Writer) RegisterMetrics(reg MetricsRegistry) {
	reg.Gauge("velvetrope_sink_rows_buffered", "Usage rows waiting to be written.", func() float64 { return float64(w.Stats.Rows.Load()) })
	reg.Counter("velvetrope_sink_rows_written_total", "Usage rows written.", func() float64 { return float64(w.Stats.Written.Load()) })
	reg.Counter("velvetrope_sink_rows_dropped_total", "Usage rows dropped over the buffer bound (analytics lost; counters exact).",
		func() float64 { return float64(w.Stats.Dropped.Load()) })
	reg.Counter("velvetrope_sink_write_errors_total", "Failed writes of usage rows (retried).", func() float64 { return float64(w.Stats.WriteErrors.Load()) })
	reg.Gauge("velvetrope_sink_last_write_age_seconds", "Seconds since usage rows were last written (-1: never).", func() float64 {
		if t := w.Stats.LastWrite.Load(); t > 0 {
			return time.Since(time.Unix(0, t)).Seconds()
		}
		return -1
	})
}

// RegisterMetrics exposes what the store holds and dropped as
// velvetrope_analytics_memory_* metrics on reg (dev's analytics store).
func (m *Memory) RegisterMetrics(reg MetricsRegistry) {
	reg.Gauge("velvetrope_analytics_memory_rows", "Usage rows dev holds in memory.", func() float64 { return float64(m.Len()) })
	reg.Gauge("velvetrope_analytics_memory_bytes", "What dev's usage rows hold, as estimated for analytics.memory_max_bytes.",
		func() float64 { return float64(m.Bytes()) })
	reg.Counter("velvetrope_analytics_memory_dropped_total", "Usage rows dev dropped over analytics.memory_max_bytes, the oldest minutes first.",
		func() float64 { return float64(m.Dropped.Load()) })
}
