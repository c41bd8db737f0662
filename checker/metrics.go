package checker

import (
	"context"

	"github.com/velvetrope/velvetrope/internal/hist"
)

// MetricsRegistry is where [Checker.RegisterMetrics] puts the checker's
// metrics (the binary's Prometheus registry); each is read when scraped,
// so the request path pays nothing for it.
type MetricsRegistry interface {
	Counter(name, help string, value func() float64)
	Gauge(name, help string, value func() float64)
	// Labeled is a metric with one label; kind is "counter" or "gauge".
	Labeled(name, help, kind, label string, values func() map[string]float64)
	// Histogram is a histogram in seconds.
	Histogram(name, help string, h *hist.Histogram)
}

// RegisterMetrics exposes the checker's decisions, bands, store calls,
// breaker, key table, emission queue and fleet as velvetrope_checker_*
// metrics on reg (its producer's are the producer's to register).
func (c *Checker) RegisterMetrics(reg MetricsRegistry) {
	snap := func(f func(Snapshot) uint64) func() float64 {
		return func() float64 { return float64(f(c.Snapshot())) }
	}
	reg.Counter("velvetrope_checker_decisions_total", "Decisions made.", snap(func(s Snapshot) uint64 { return s.Decisions }))
	reg.Counter("velvetrope_checker_denied_total", "Decisions that refused the request.", snap(func(s Snapshot) uint64 { return s.Denied }))
	reg.Counter("velvetrope_checker_far_band_total", "Descriptors decided from memory far from their limit.", snap(func(s Snapshot) uint64 { return s.FarBand }))
	reg.Counter("velvetrope_checker_first_touch_total", "Descriptors decided from memory on the first-touch allowance (no store answer for the window yet).",
		snap(func(s Snapshot) uint64 { return s.FirstTouch }))
	reg.Counter("velvetrope_checker_near_band_total", "Descriptors decided in the near-limit band.", snap(func(s Snapshot) uint64 { return s.NearBand }))
	reg.Counter("velvetrope_checker_over_band_total", "Descriptors refused from memory over their limit.", snap(func(s Snapshot) uint64 { return s.OverBand }))
	reg.Counter("velvetrope_checker_store_charges_total", "Atomic charges in the counter store.", snap(func(s Snapshot) uint64 { return s.SyncCharges }))
	reg.Counter("velvetrope_checker_late_charges_total", "Costs charged after the response (POST /v1/charge, velvetrope.v1.Charges, the middleware's ChargeAfter): counted, never refused.",
		func() float64 { return float64(c.Stats.Late.Load()) })
	reg.Counter("velvetrope_checker_late_charge_failures_total", "Late charges a `mode: sync` rule's store could not take: nothing counted, the caller told to retry.",
		func() float64 { return float64(c.Stats.LateFailed.Load()) })
	reg.Labeled("velvetrope_leases_in_flight", "Concurrency leases held in the whole fleet, per rule (read from the counter store at each scrape: every checker reports the same).",
		"gauge", "rule", func() map[string]float64 {
			n, err := c.InFlight(context.Background())
			out := make(map[string]float64, len(n))
			if err == nil {
				for id, v := range n {
					out[id] = float64(v) // rule file ids: bounded by the rule set
				}
			}
			return out
		})
	reg.Counter("velvetrope_checker_leases_released_total", "Concurrency leases this checker released (POST /v1/release, the middleware, Envoy's is_negative_hits).",
		func() float64 { return float64(c.Stats.LeasesReleased.Load()) })
	reg.Counter("velvetrope_checker_degraded_total", "Decisions made by a failure policy.", snap(func(s Snapshot) uint64 { return s.Degraded }))
	reg.Counter("velvetrope_checker_deltas_emitted_total", "Consumption deltas handed to the producer.", snap(func(s Snapshot) uint64 { return s.DeltasEmitted }))
	reg.Counter("velvetrope_checker_emit_errors_total", "Flushes the producer refused.", snap(func(s Snapshot) uint64 { return s.EmitErrors }))
	reg.Counter("velvetrope_checker_refresh_errors_total", "Counter refreshes that failed.", snap(func(s Snapshot) uint64 { return s.RefreshErrors }))
	reg.Counter("velvetrope_checker_evictions_total", "Keys evicted from the table.", snap(func(s Snapshot) uint64 { return s.Evictions }))
	reg.Gauge("velvetrope_checker_keys", "Counter keys held in memory.", func() float64 { return float64(c.Snapshot().Keys) })
	reg.Gauge("velvetrope_checker_compact_keys", "Keys held as compact records: decided on their first-touch allowance only.",
		func() float64 { return float64(c.Snapshot().CompactKeys) })
	reg.Gauge("velvetrope_checker_held_hits", "Hits far-from-limit keys hold back, decided in memory and not yet emitted (at most checker.max_held_hits_total): what a kill -9 would lose beside one flush.",
		func() float64 { return float64(c.Snapshot().HeldHits) })
	reg.Gauge("velvetrope_checker_key_bytes", "The heap the key table holds, as estimated for checker.max_bytes.", func() float64 { return float64(c.Snapshot().KeyBytes) })
	reg.Labeled("velvetrope_checker_store_errors_total", "Counter store calls that failed, by operation (charge: the failure policy decided; read: a refresh; controls: reading operator controls).",
		"counter", "op", func() map[string]float64 {
			s := c.Snapshot()
			return map[string]float64{"charge": float64(c.Stats.StoreErrors.Load()), "read": float64(s.RefreshErrors), "controls": float64(s.ControlErrors)}
		})
	reg.Gauge("velvetrope_checker_store_breaker_state", "The counter store's circuit breaker: 0 closed, 1 half-open (one call probing), 2 open (no calls; failure policies decide).",
		func() float64 { st, _, _ := c.Breaker(); return float64(st) })
	reg.Counter("velvetrope_checker_store_breaker_opens_total", "Times the breaker opened after consecutive store failures.",
		func() float64 { _, o, _ := c.Breaker(); return float64(o) })
	reg.Counter("velvetrope_checker_store_breaker_rejected_total", "Store calls the open breaker refused without waiting.",
		func() float64 { _, _, r := c.Breaker(); return float64(r) })
	reg.Histogram("velvetrope_checker_emit_latency_seconds", "From a key's first pending decision to the producer accepting its delta.", &c.out.Latency)
	reg.Histogram("velvetrope_checker_refresh_staleness_seconds", "Age of a key's store view when a refresh replaces it.", &c.Stats.Staleness)
	reg.Gauge("velvetrope_checker_live_instances", "Checkers sharing the counter store, as its registry last said.",
		func() float64 { l, _, _ := c.Fleet(); return float64(l) })
	reg.Gauge("velvetrope_checker_clock_skew_seconds", "The counter store's clock minus this checker's own, at the last heartbeat.",
		func() float64 { _, s, _ := c.Fleet(); return s.Seconds() })
	reg.Gauge("velvetrope_checker_clock_adjustment_seconds", "What is added to this checker's clock to keep it within checker.max_clock_skew of the store's.",
		func() float64 { _, _, a := c.Fleet(); return a.Seconds() })
	reg.Gauge("velvetrope_checker_queue_keys", "Keys with consumption not yet emitted.", func() float64 { k, _, _ := c.Queue(); return float64(k) })
	reg.Gauge("velvetrope_checker_queue_lazy_keys", "Of those, keys far from their limits whose emission waits (up to checker.max_emit_interval).",
		func() float64 { _, l, _ := c.Queue(); return float64(l) })
	reg.Gauge("velvetrope_checker_queue_buffered_deltas", "Deltas the producer refused, waiting for the next flush.", func() float64 { _, _, b := c.Queue(); return float64(b) })
	reg.Counter("velvetrope_checker_controlled_total", "Descriptors an operator control (allow, deny, limit) decided.", snap(func(s Snapshot) uint64 { return s.Controlled }))
	reg.Gauge("velvetrope_checker_controls", "Operator controls in force.", func() float64 { return float64(c.ctl.Current().Listed(c.clock.Now())) })
}
