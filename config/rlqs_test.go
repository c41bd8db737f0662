package config

import (
	"errors"
	"strings"
	"testing"
)

// TestRLQSBuckets: a bucket whose keys are a block's bucket_keys is those
// entries in the block's order, whatever the map's; other buckets map to
// nothing; blocks that cannot map buckets are refused naming their line.
func TestRLQSBuckets(t *testing.T) {
	f, err := ParseRules("q.yaml", []byte(`domain: envoy
descriptors:
  - key: name
    rlqs: {bucket_keys: [name, tenant]}
    descriptors:
      - key: tenant
        algorithm: fixed_window
        rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: route
    rlqs: {bucket_keys: [route]}
    rate_limit: {unit: second, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compile([]*File{f})
	if err != nil {
		t.Fatal(err)
	}
	es, err := rs.BucketEntries("envoy", map[string]string{"tenant": "acme", "name": "api"})
	if err != nil || len(es) != 2 || es[0] != (Entry{Key: "name", Value: "api"}) || es[1] != (Entry{Key: "tenant", Value: "acme"}) {
		t.Fatalf("entries %v, %v", es, err)
	}
	if r, _ := rs.Lookup("envoy"); r.Match(es) == nil || r.Match(es).Limit != 1000 {
		t.Fatal("the bucket's entries match no rule")
	}
	for _, b := range []map[string]string{{"name": "api"}, {"name": "a", "tenant": "b", "x": "c"}, {}} {
		if _, err := rs.BucketEntries("envoy", b); !errors.Is(err, ErrNoBucketMapping) {
			t.Errorf("bucket %v: %v", b, err)
		}
	}
	if _, err := rs.BucketEntries("nope", map[string]string{"route": "x"}); !errors.Is(err, ErrNoBucketMapping) {
		t.Errorf("unknown domain: %v", err)
	}
	for _, c := range []struct{ name, src, want string }{
		{"not first key", "domain: d\ndescriptors:\n  - key: a\n    rlqs: {bucket_keys: [b, a]}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "must start with"},
		{"nested", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rlqs: {bucket_keys: [b]}\n        rate_limit: {unit: second, requests_per_unit: 1}\n", "top-level"},
		{"twice", "domain: d\ndescriptors:\n  - key: a\n    rlqs: {bucket_keys: [a, a]}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "twice"},
		{"empty", "domain: d\ndescriptors:\n  - key: a\n    rlqs: {bucket_keys: []}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "at least one"},
		{"no such child", "domain: d\ndescriptors:\n  - key: a\n    rlqs: {bucket_keys: [a, b]}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "could never match"},
		{"concurrency", "domain: d\ndescriptors:\n  - key: a\n    rlqs: {bucket_keys: [a]}\n    concurrency: {max_in_flight: 2}\n", "no leases"},
		{"same keys", "domain: d\ndescriptors:\n  - key: a\n    rlqs: {bucket_keys: [a, b]}\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rlqs: {bucket_keys: [b, a]}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "map to one"},
	} {
		f, err := ParseRules("q.yaml", []byte(c.src))
		if err == nil {
			_, err = Compile([]*File{f})
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "q.yaml:") {
			t.Errorf("%s: %v, want an error naming q.yaml with %q", c.name, err, c.want)
		}
	}
}
