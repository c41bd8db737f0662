// Package dashboard serves the analytics page at "/": one HTML file with
// its script and styles embedded in the binary (no external network), which
// draws the analytics API's answers — allowed, shadow-denied, deferred and
// denied per minute, the top denied keys and the deny rate per rule with
// every count apart, the elastic pools' borrowings — and refreshes them on
// its own.
package dashboard

import (
	"embed"
	"net/http"
)

//go:embed assets/index.html
var assets embed.FS

// Register serves the page at "GET /{$}" (the root only; everything else
// keeps its own handler or 404s).
func Register(mux *http.ServeMux) {
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		panic("dashboard: embedded page missing: " + err.Error()) // a build defect, caught by the tests
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Everything the page needs comes from this origin.
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(page)
	})
}
