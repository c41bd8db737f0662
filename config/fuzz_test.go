package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseRules checks that no input crashes the parser, that every
// rejection is a positioned ErrorList, and that whatever parses compiles or
// is rejected cleanly.
func FuzzParseRules(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/envoy/*.yaml")
	for _, s := range seeds {
		data, _ := os.ReadFile(s)
		f.Add(data)
	}
	f.Add([]byte("domain: a\ndescriptors:\n  - key: k\n    algorithm: token_bucket\n    burst: 3\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	f.Add([]byte("domain: &x a\ndescriptors: *x\n"))
	f.Add([]byte("domain: x\ndescriptors: &d\n  - key: k\n    descriptors: *d\n"))
	f.Add([]byte(billionLaughs(3)))
	f.Add([]byte("domain: x\nd: [[[[[[[[[[]]]]]]]]]]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := ParseRules("fuzz.yaml", data)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not an ErrorList: %T %v", err, err)
			}
			for _, e := range list {
				if e.File != "fuzz.yaml" || e.Msg == "" {
					t.Fatalf("error without file or message: %+v", e)
				}
			}
			return
		}
		rs, err := Compile([]*File{file})
		if err != nil {
			return
		}
		for _, r := range rs.Rules() {
			if !r.Unlimited && r.Limit > 0 && r.Limiter == nil {
				t.Fatalf("rule %s has no limiter", r.ID)
			}
			rs.Match(file.Domain, r.Path)
		}
	})
}
