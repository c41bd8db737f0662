package httpapi

import "github.com/velvetrope/velvetrope/internal/metrics"

// RegisterMetrics exposes the listener's requests and bodies in flight and
// the requests it answered busy as velvetrope_http_* metrics on reg.
func (s *Server) RegisterMetrics(reg *metrics.Registry) {
	reg.Gauge("velvetrope_http_in_flight", "HTTP requests being decided, their bodies received (at most http.max_in_flight; /healthz, /readyz and /metrics not counted).",
		func() float64 { return float64(s.InFlight()) })
	reg.Gauge("velvetrope_http_body_bytes", "Memory of the HTTP request bodies being received or decided (at most http.max_body_bytes_in_flight).",
		func() float64 { return float64(s.BodyBytes()) })
	reg.Counter("velvetrope_http_busy_total", "HTTP requests answered 503 because http.max_in_flight requests or http.max_body_bytes_in_flight bytes of bodies were in flight.",
		func() float64 { return float64(s.Busy()) })
}
