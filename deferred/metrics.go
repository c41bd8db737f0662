package deferred

import "fmt"

// MetricsRegistry is where the package's RegisterMetrics methods put their
// metrics (the velvetrope binary's Prometheus registry). Each metric reads
// its value from the function given when it is scraped.
type MetricsRegistry interface {
	Counter(name, help string, value func() float64)
	Gauge(name, help string, value func() float64)
	// Labeled is a metric with one label; kind is "counter" or "gauge".
	Labeled(name, help, kind, label string, values func() map[string]float64)
}

// RegisterMetrics exposes the queue's enqueues and refusals as
// velvetrope_deferred_* metrics on reg.
func (q *Queue) RegisterMetrics(reg MetricsRegistry) {
	reg.Counter("velvetrope_deferred_enqueued_total", "Deferred requests appended to the deferred topic.", func() float64 { return float64(q.Enqueued.Load()) })
	reg.Counter("velvetrope_deferred_enqueue_errors_total", "Deferred requests the topic or the ticket store refused (answered deny, with defer_error).",
		func() float64 { return float64(q.EnqueueErrors.Load()) })
	reg.Counter("velvetrope_deferred_payloads_refused_total", "Deferred requests whose payload was refused (too large or malformed).",
		func() float64 { return float64(q.Refused.Load()) })
	reg.Labeled("velvetrope_deferred_refused_total", "Requests that would have been deferred, refused at a bound of the queue "+
		"(answered deny, with defer_error): the rule's defer.max_queued for the key, or deferred.max_bytes in all.", "counter", "reason",
		func() map[string]float64 {
			return map[string]float64{BoundMaxQueued: float64(q.FullKey.Load()), BoundMaxBytes: float64(q.FullBytes.Load())}
		})
	reg.Counter("velvetrope_deferred_repeats_total", "Deferred requests whose request_id was deferred before: answered that ticket, not queued again.",
		func() float64 { return float64(q.Repeats.Load()) })
}

// lagger is a consumer that knows how far behind its topic's end it is
// (events.KafkaConsumer; dev's in-memory topic does not say).
type lagger interface{ Lag() int64 }

// RegisterMetrics exposes the drain's work as velvetrope_drain_* metrics
// on reg, and its consumer's lag when the consumer reports one.
func (d *Drain) RegisterMetrics(reg MetricsRegistry) {
	reg.Gauge("velvetrope_drain_queue_depth", "Deferred items this drain holds: waiting for budget or being delivered.",
		func() float64 { n, _, _ := d.Depth(); return float64(n) })
	reg.Labeled("velvetrope_drain_queue_age_seconds", "Age of the items held (since enqueued), by quantile.", "gauge", "quantile",
		func() map[string]float64 {
			_, p50, p99 := d.Depth()
			return map[string]float64{"0.5": p50.Seconds(), "0.99": p99.Seconds()}
		})
	reg.Counter("velvetrope_drain_records_total", "Records read from the deferred topic.", func() float64 { return float64(d.Fetched.Load()) })
	reg.Counter("velvetrope_drain_releases_total", "Items the counters admitted again (each charged once).", func() float64 { return float64(d.Releases.Load()) })
	reg.Counter("velvetrope_drain_release_waits_total", "Release decisions that said not yet.", func() float64 { return float64(d.Waits.Load()) })
	reg.Counter("velvetrope_drain_deliveries_total", "Items the target accepted (2xx).", func() float64 { return float64(d.Deliveries.Load()) })
	reg.Counter("velvetrope_drain_retries_total", "Delivery attempts that failed and were tried again.", func() float64 { return float64(d.Retries.Load()) })
	reg.Counter("velvetrope_drain_duplicates_total", "Records of tickets already finished (re-read after a crash or rebalance), not delivered again.",
		func() float64 { return float64(d.Duplicates.Load()) })
	reg.Counter("velvetrope_drain_store_errors_total", "Release decisions or ticket writes the counter store failed.", func() float64 { return float64(d.StoreErrors.Load()) })
	reg.Counter("velvetrope_drain_commit_errors_total", "Offset commits that failed (retried).", func() float64 { return float64(d.CommitErrs.Load()) })
	reg.Labeled("velvetrope_drain_dead_letters_total", "Items set aside on the dead-letter topic, by reason.", "counter", "reason",
		func() map[string]float64 {
			out := map[string]float64{}
			for k, v := range d.DeadLetters() {
				out[k] = float64(v)
			}
			return out
		})
	if l, ok := d.cfg.Consumer.(lagger); ok {
		reg.Gauge("velvetrope_drain_consumer_lag", "Records the drain's consumer is behind the deferred topic's end.",
			func() float64 { return float64(l.Lag()) })
	}
}

// RegisterMetrics exposes the records let go as
// velvetrope_dev_dead_letters_dropped_total on reg (dev's dead letters).
func (m *MemDeadLetters) RegisterMetrics(reg MetricsRegistry) {
	reg.Counter("velvetrope_dev_dead_letters_dropped_total", fmt.Sprintf("Dead letters dev let go, the oldest first, to keep at most %d MiB of them.", m.maxBytes>>20),
		func() float64 { return float64(m.Dropped.Load()) })
}
