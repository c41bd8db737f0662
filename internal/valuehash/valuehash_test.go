package valuehash

import (
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testrules"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// TestValue: a keyed hash of 32 hex digits that depends on the key, the
// domain and the entry key as well as the value.
func TestValue(t *testing.T) {
	h, err := New([]byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	base := h.Value("api", "user", "priya")
	if len(base) != 32 || h.Value("api", "user", "priya") != base {
		t.Fatalf("hash %q: want 32 hex digits, stable", base)
	}
	other, _ := New([]byte("other"))
	for name, got := range map[string]string{
		"key":    other.Value("api", "user", "priya"),
		"domain": h.Value("web", "user", "priya"),
		"entry":  h.Value("api", "ip", "priya"),
		"value":  h.Value("api", "user", "priyA"),
	} {
		if got == base {
			t.Errorf("another %s hashes the same", name)
		}
	}
	if h.Random() || other.Random() {
		t.Fatal("a keyed hasher says random")
	}
	r1, _ := New(nil)
	r2, _ := New(nil)
	if !r1.Random() || r1.Value("api", "user", "priya") == r2.Value("api", "user", "priya") {
		t.Fatal("random keys: want Random and different hashes per process")
	}
}

// TestRequest: only the entries a rule hashes change, in a copy; a request
// no rule hashes is returned as it is.
func TestRequest(t *testing.T) {
	h, _ := New([]byte("secret"))
	hashing := &config.Rule{Hashed: []bool{false, true}}
	plain := &config.Rule{}
	mk := func() *ratelimit.Request {
		return &ratelimit.Request{Domain: "api", Descriptors: []ratelimit.Descriptor{
			{Entries: []config.Entry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "priya"}}},
			{Entries: []config.Entry{{Key: "user", Value: "priya"}}},
		}}
	}
	tests := []struct {
		name  string
		rules []*config.Rule
		want  [2][]string // descriptor values after
		copy  bool        // a rule hashes: the answer is a copy
	}{
		{"no rule hashes", []*config.Rule{plain, nil}, [2][]string{{"acme", "priya"}, {"priya"}}, false},
		{"second entry of the first", []*config.Rule{hashing, plain},
			[2][]string{{"acme", h.Value("api", "user", "priya")}, {"priya"}}, true},
		{"beyond the rule's entries", []*config.Rule{plain, hashing}, [2][]string{{"acme", "priya"}, {"priya"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := mk()
			got := h.Request(req, tt.rules)
			for i, d := range got.Descriptors {
				for j, e := range d.Entries {
					if e.Value != tt.want[i][j] {
						t.Errorf("descriptor %d entry %d: %q, want %q", i, j, e.Value, tt.want[i][j])
					}
				}
			}
			if orig := mk(); req.Descriptors[0].Entries[1] != orig.Descriptors[0].Entries[1] {
				t.Error("the caller's request was modified")
			}
			if copied := got != req; copied != tt.copy {
				t.Errorf("returned a copy: %v, want %v", copied, tt.copy)
			}
		})
	}
}

// TestHashed: a request's values are hashed by the rules they match in
// the rule set; an unknown domain or a prehashed request is left alone.
func TestHashed(t *testing.T) {
	h, _ := New([]byte("secret"))
	rs := testrules.Store(t, `domain: api
descriptors:
  - key: user
    hash_values: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`).Load()
	mk := func(domain string, prehashed bool) *ratelimit.Request {
		return &ratelimit.Request{Domain: domain, Prehashed: prehashed, Descriptors: []ratelimit.Descriptor{
			{Entries: []config.Entry{{Key: "user", Value: "priya"}}}}}
	}
	tests := []struct {
		name   string
		req    *ratelimit.Request
		hashed bool
	}{
		{"matched", mk("api", false), true},
		{"unknown domain", mk("web", false), false},
		{"prehashed", mk("api", true), false},
	}
	for _, tt := range tests {
		got := h.Hashed(rs, tt.req)
		if hashed := got != tt.req; hashed != tt.hashed {
			t.Fatalf("%s: hashed %v, want %v", tt.name, hashed, tt.hashed)
		}
		if tt.hashed && got.Descriptors[0].Entries[0].Value != h.Value("api", "user", "priya") {
			t.Fatalf("%s: value %q is not its hash", tt.name, got.Descriptors[0].Entries[0].Value)
		}
	}
}
