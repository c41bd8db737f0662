package aggregator

// MetricsRegistry is where [Kafka.RegisterMetrics] puts the aggregator's
// metrics (the velvetrope binary's Prometheus registry). Each metric reads
// its value from the function given when it is scraped.
type MetricsRegistry interface {
	Counter(name, help string, value func() float64)
	Gauge(name, help string, value func() float64)
	// Labeled is a metric with one label; kind is "counter" or "gauge".
	Labeled(name, help, kind, label string, values func() map[string]float64)
}

// RegisterMetrics exposes the aggregator's batches, Redis work, consumer
// lag and realised accuracy (per rule) as velvetrope_aggregator_* metrics
// on reg.
func (a *Kafka) RegisterMetrics(reg MetricsRegistry) {
	reg.Counter("velvetrope_aggregator_batches_total", "Batches applied and committed.", func() float64 { return float64(a.Stats.Batches.Load()) })
	reg.Counter("velvetrope_aggregator_deltas_applied_total", "Deltas applied to Redis.", func() float64 { return float64(a.Stats.Applied.Load()) })
	reg.Counter("velvetrope_aggregator_deltas_skipped_total", "Copies skipped by the sequence check.", func() float64 { return float64(a.Stats.Skipped.Load()) })
	reg.Counter("velvetrope_aggregator_records_total", "Records taken from the topic (a record packs many deltas).", func() float64 { return float64(a.Stats.Records.Load()) })
	reg.Counter("velvetrope_aggregator_bad_records_total", "Malformed records, and malformed deltas of packed records, skipped.", func() float64 { return float64(a.Stats.Bad.Load()) })
	reg.Counter("velvetrope_aggregator_deltas_already_applied_total", "Deltas a charge applied when it decided (analytics only, no Redis work).",
		func() float64 { return float64(a.Stats.AlreadyApplied.Load()) })
	reg.Counter("velvetrope_aggregator_redis_round_trips_total", "Redis round trips.", func() float64 { return float64(a.Stats.RoundTrips.Load()) })
	reg.Counter("velvetrope_aggregator_redis_scripts_total", "Redis script calls (a call applies up to 100 counters of a batch; a cluster: one counter's windows).",
		func() float64 { return float64(a.Stats.Scripts.Load()) })
	reg.Counter("velvetrope_aggregator_redis_errors_total", "Failed applies (retried).", func() float64 { return float64(a.Stats.RedisErrors.Load()) })
	reg.Counter("velvetrope_aggregator_apply_seconds_total", "Time spent applying.", func() float64 { return float64(a.Stats.ApplyNanos.Load()) / 1e9 })
	reg.Gauge("velvetrope_aggregator_consumer_lag", "Messages the consumer is behind.", func() float64 { return float64(a.Lag()) })
	reg.Gauge("velvetrope_aggregator_last_batch_size", "Deltas in the last batch applied.", func() float64 { return float64(a.Stats.LastBatch.Load()) })
	reg.Labeled("velvetrope_aggregator_overshoot_hits_total", "Hits admitted above a window's limit, per rule.", "counter", "rule",
		func() map[string]float64 { o, _, _ := a.Accuracy.Report(); return o })
	reg.Labeled("velvetrope_aggregator_under_admission_hits_total", "Hits refused while the window ended below its limit, per rule.", "counter", "rule",
		func() map[string]float64 { _, u, _ := a.Accuracy.Report(); return u })
	reg.Labeled("velvetrope_aggregator_windows_total", "Windows judged for accuracy, per rule.", "counter", "rule",
		func() map[string]float64 { _, _, w := a.Accuracy.Report(); return w })
}
