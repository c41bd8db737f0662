package metrics

import (
	"time"

	"net/http/httptest"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/internal/hist"
)

func TestExposition(t *testing.T) {
	r := New()
	n := 41.0
	r.Counter("velvetrope_b_total", "B things.", func() float64 { return n })
	r.Gauge("velvetrope_a", "A level.", func() float64 { return 2.5 })
	n++
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := "# HELP velvetrope_a A level.\n# TYPE velvetrope_a gauge\nvelvetrope_a 2.5\n" +
		"# HELP velvetrope_b_total B things.\n# TYPE velvetrope_b_total counter\nvelvetrope_b_total 42\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
	r2 := New()
	r2.Labeled("velvetrope_over_total", "Over.", "counter", "rule", func() map[string]float64 {
		return map[string]float64{"api:b": 2, `api:"a"`: 1}
	})
	rec = httptest.NewRecorder()
	r2.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want = "# HELP velvetrope_over_total Over.\n# TYPE velvetrope_over_total counter\n" +
		"velvetrope_over_total{rule=\"api:\\\"a\\\"\"} 1\nvelvetrope_over_total{rule=\"api:b\"} 2\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("labeled: got:\n%s\nwant:\n%s", got, want)
	}
	// a label value that is not UTF-8 is reported in the scrape, the other
	// series still come out
	r3 := New()
	r3.Labeled("velvetrope_bad_total", "Bad.", "counter", "rule", func() map[string]float64 {
		return map[string]float64{"ok": 1, "\xff": 2}
	})
	r3.Gauge("velvetrope_fine", "Fine.", func() float64 { return 3 })
	rec = httptest.NewRecorder()
	r3.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "velvetrope_fine 3") {
		t.Fatalf("one bad series hid the others: %d\n%s", rec.Code, rec.Body)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a name without the prefix was accepted")
		}
	}()
	r.Counter("other_total", "x", func() float64 { return 0 })
}

func TestHistogramExposition(t *testing.T) {
	var h hist.Histogram
	h.Observe(3 * time.Millisecond)
	h.Observe(2 * time.Second)
	r := New()
	r.Histogram("velvetrope_lat_seconds", "Latency.", &h)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"# TYPE velvetrope_lat_seconds histogram", `velvetrope_lat_seconds_bucket{le="0.001"} 0`,
		`velvetrope_lat_seconds_bucket{le="0.005"} 1`, `velvetrope_lat_seconds_bucket{le="2.5"} 2`,
		`velvetrope_lat_seconds_bucket{le="+Inf"} 2`, "velvetrope_lat_seconds_sum 2.003", "velvetrope_lat_seconds_count 2"} {
		if !strings.Contains(body, want) {
			t.Fatalf("no %q in:\n%s", want, body)
		}
	}
}

// TestDescribed: every metric registered has its line, those without a
// sample (a labeled metric with no series) too, and a name registered
// twice has one.
func TestDescribed(t *testing.T) {
	r := New()
	r.Counter("velvetrope_b_total", "B things.", func() float64 { return 0 })
	r.Counter("velvetrope_b_total", "B things.", func() float64 { return 1 })
	r.Gauge("velvetrope_a", "A level.", func() float64 { return 2 })
	r.Labeled("velvetrope_c_total", "C by rule.", "counter", "rule", func() map[string]float64 { return nil })
	r.Multi("velvetrope_d", "D.", "gauge", []string{"x", "y"}, func() []Sample { return nil })
	var h hist.Histogram
	r.Histogram("velvetrope_e_seconds", "E.", &h)
	want := []string{"velvetrope_a gauge {} A level.", "velvetrope_b_total counter {} B things.",
		"velvetrope_c_total counter {rule} C by rule.", "velvetrope_d gauge {x,y} D.", "velvetrope_e_seconds histogram {} E."}
	got := r.Described()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
