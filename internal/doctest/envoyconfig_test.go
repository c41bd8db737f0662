package doctest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/cncf/xds/go/xds/type/matcher/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlqsfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestEnvoyRLQSFilterConfig: envoy.md's rate_limit_quota filter, as
// printed, decodes as Envoy decodes it (protojson of its typed_config,
// every Any resolved) and passes the filter's own validation rules (the
// generated ValidateAll of go-control-plane): no field misspelt, no value
// Envoy would refuse. (No Envoy runs here to load it whole.)
func TestEnvoyRLQSFilterConfig(t *testing.T) {
	bs := envoyBlocks(t)
	found := false
	for _, b := range bs {
		if b.lang != "yaml" || !strings.Contains(b.text(), "envoy.filters.http.rate_limit_quota") {
			continue
		}
		found = true
		var doc struct {
			Filters []struct {
				Name        string         `yaml:"name"`
				TypedConfig map[string]any `yaml:"typed_config"`
			} `yaml:"http_filters"`
		}
		if err := yaml.Unmarshal([]byte(b.text()), &doc); err != nil || len(doc.Filters) != 1 {
			t.Fatalf("%s: %v", b.where(), err)
		}
		js, err := json.Marshal(doc.Filters[0].TypedConfig)
		if err != nil {
			t.Fatal(err)
		}
		var cfg rlqsfilter.RateLimitQuotaFilterConfig
		body := strings.Replace(string(js), `"@type":"type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig",`, "", 1)
		if err := protojson.Unmarshal([]byte(body), &cfg); err != nil {
			t.Fatalf("%s: the filter config does not decode: %v\n%s", b.where(), err, js)
		}
		if err := cfg.ValidateAll(); err != nil {
			t.Fatalf("%s: Envoy would refuse it: %v", b.where(), err)
		}
		if cfg.GetDomain() != "envoy" || cfg.GetBucketMatchers() == nil {
			t.Fatalf("%s: decoded %v", b.where(), &cfg)
		}
		// the bucket settings inside the matcher's action, decoded and validated too
		act := cfg.GetBucketMatchers().GetMatcherList().GetMatchers()[0].GetOnMatch().GetAction().GetTypedConfig()
		var settings rlqsfilter.RateLimitQuotaBucketSettings
		if err := act.UnmarshalTo(&settings); err != nil {
			t.Fatal(err)
		}
		if err := settings.ValidateAll(); err != nil {
			t.Fatalf("%s: the bucket settings: %v", b.where(), err)
		}
		if len(settings.GetBucketIdBuilder().GetBucketIdBuilder()) != 2 || settings.GetReportingInterval().AsDuration().Seconds() != 1 {
			t.Fatalf("%s: bucket settings %v", b.where(), &settings)
		}
	}
	if !found {
		t.Fatal("docs/envoy.md has no rate_limit_quota filter config")
	}
}

// TestEnvoyStreamDoneConfig: envoy.md's route rate limits for a cost known
// after the response decode as Envoy's RateLimit actions and pass their
// validation rules.
func TestEnvoyStreamDoneConfig(t *testing.T) {
	bs := envoyBlocks(t)
	n := 0
	for _, b := range bs {
		if b.lang != "yaml" || !strings.Contains(b.text(), "apply_on_stream_done") {
			continue
		}
		var doc struct {
			RateLimits []map[string]any `yaml:"rate_limits"`
		}
		if err := yaml.Unmarshal([]byte(b.text()), &doc); err != nil {
			t.Fatalf("%s: %v", b.where(), err)
		}
		for i, rl := range doc.RateLimits {
			js, _ := json.Marshal(rl)
			var r routev3.RateLimit
			if err := protojson.Unmarshal(js, &r); err != nil {
				t.Fatalf("%s: rate_limits[%d] does not decode: %v", b.where(), i, err)
			}
			if err := r.ValidateAll(); err != nil {
				t.Fatalf("%s: rate_limits[%d]: Envoy would refuse it: %v", b.where(), i, err)
			}
			n++
		}
	}
	if n != 2 {
		t.Fatalf("checked %d rate limits, want envoy.md's 2", n)
	}
}

// envoyBlocks are docs/envoy.md's blocks.
func envoyBlocks(t *testing.T) []block {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := parseBlocks("docs/envoy.md", string(src))
	if err != nil {
		t.Fatal(err)
	}
	return bs
}
