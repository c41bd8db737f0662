package rls

// MetricsRegistry is where [Server.RegisterMetrics] puts the service's
// metrics (the velvetrope binary's Prometheus registry). The metric reads
// its values from the function given when it is scraped.
type MetricsRegistry interface {
	// Labeled is a metric with one label; kind is "counter" or "gauge".
	Labeled(name, help, kind, label string, values func() map[string]float64)
}

// RegisterMetrics exposes the service's calls by outcome as
// velvetrope_rls_calls_total{code} on reg.
func (s *Server) RegisterMetrics(reg MetricsRegistry) {
	reg.Labeled("velvetrope_rls_calls_total", "ShouldRateLimit calls (gRPC and /json) by outcome.", "counter", "code",
		func() map[string]float64 {
			return map[string]float64{"ok": float64(s.Stats.OK.Load()), "over_limit": float64(s.Stats.OverLimit.Load()),
				"invalid_argument": float64(s.Stats.Invalid.Load()), "internal": float64(s.Stats.Errors.Load())}
		})
}
