package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// benchSink keeps the decoded request alive so the compiler cannot drop
// the work.
var benchSink ratelimit.Request

// BenchmarkDecodeCheck measures reading a /v1/check body into the checker
// request: the JSON decoding every call pays before the checker runs.
func BenchmarkDecodeCheck(b *testing.B) {
	bodies := []struct{ name, body string }{
		{"small", `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hits":1}`},
		{"typical", `{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":"acme-corp"},{"key":"route","value":"/v1/export/reports"}]},` +
			`{"entries":[{"key":"user_id","value":"5f0c6a3e-9b1d-4c1e-8a7b-2d3e4f5a6b7c"}],"hits":2}],"hits":1,"request_id":"req-8c1f2a9b7e"}`},
	}
	for _, c := range bodies {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(c.body)
			rd := bytes.NewReader(body)
			r := httptest.NewRequest(http.MethodPost, "/v1/check", nil)
			w := httptest.NewRecorder()
			schema := checkSchema(config.LimitsConfig{})
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				rd.Reset(body)
				r.Body = io.NopCloser(rd)
				var in httpjson.CheckRequest
				req, err := readCheck(w, r, schema, 1<<20, &in)
				if err != nil {
					b.Fatal(err)
				}
				benchSink = req
			}
		})
	}
}

// BenchmarkDecodeCheckParallel is BenchmarkDecodeCheck on every CPU.
func BenchmarkDecodeCheckParallel(b *testing.B) {
	body := []byte(`{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":"acme-corp"},{"key":"route","value":"/v1/export/reports"}]}],"hits":1}`)
	schema := checkSchema(config.LimitsConfig{})
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.RunParallel(func(pb *testing.PB) {
		rd := bytes.NewReader(body)
		r := httptest.NewRequest(http.MethodPost, "/v1/check", nil)
		w := httptest.NewRecorder()
		var sink ratelimit.Request
		for pb.Next() {
			rd.Reset(body)
			r.Body = io.NopCloser(rd)
			var in httpjson.CheckRequest
			req, err := readCheck(w, r, schema, 1<<20, &in)
			if err != nil {
				b.Fatal(err)
			}
			sink = req
		}
		_ = sink
	})
}
