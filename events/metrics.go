package events

// MetricsRegistry is where a producer's RegisterMetrics puts its metrics
// (the velvetrope binary's Prometheus registry). Each metric reads its
// value from the function given when it is scraped.
type MetricsRegistry interface {
	Counter(name, help string, value func() float64)
	Gauge(name, help string, value func() float64)
}

// RegisterMetrics exposes, as velvetrope_producer_* metrics on reg, the
// deltas and records Kafka took, the deltas set aside, the spill file's
// use and the Kafka writes refused.
func (p *KafkaProducer) RegisterMetrics(reg MetricsRegistry) {
	registerDropped(reg, p)
	reg.Counter("velvetrope_producer_deltas_total", "Deltas Kafka acknowledged (directly or replayed from the spill file).", func() float64 { return float64(p.Produced.Load()) })
	reg.Counter("velvetrope_producer_records_total", "Kafka records acknowledged; a record packs the deltas of one partition.", func() float64 { return float64(p.Records.Load()) })
	reg.Counter("velvetrope_producer_spilled_total", "Deltas written to the spill file.", func() float64 { return float64(p.Spilled.Load()) })
	reg.Gauge("velvetrope_producer_spill_records", "Records (of one or more deltas) waiting in the spill file.", func() float64 { return float64(p.SpillRecords()) })
	reg.Gauge("velvetrope_producer_spill_bytes", "Bytes of the spill file not yet replayed.", func() float64 { return float64(p.SpillBytes()) })
	reg.Counter("velvetrope_producer_kafka_errors_total", "Writes Kafka refused in part or whole (the deltas went to the spill file).", func() float64 { return float64(p.KafkaErrors.Load()) })
	reg.Counter("velvetrope_producer_failed_total", "Produce calls that failed with the spill file unable to take the deltas (the checker keeps them buffered).", func() float64 { return float64(p.Failed.Load()) })
}

// RegisterMetrics exposes, when the bus is a checker's producer, the
// deltas it set aside as velvetrope_producer_dropped_total on reg (an
// in-memory bus has no spill file).
func (b *MemBus) RegisterMetrics(reg MetricsRegistry) { registerDropped(reg, b) }

// registerDropped is the one metric every producer has.
func registerDropped(reg MetricsRegistry, d DropCounter) {
	reg.Counter("velvetrope_producer_dropped_total", "Deltas set aside for good: invalid, above the record bound, or refused by the broker for what they are (logged; they never hold up the others).",
		func() float64 { return float64(d.DroppedDeltas()) })
}
