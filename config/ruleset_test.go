package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadEnvoyExamplesUnchanged(t *testing.T) {
	rs, err := LoadRules("testdata/envoy")
	if err != nil {
		t.Fatalf("Envoy example configs must load unchanged: %v", err)
	}
	want := []string{"edge_proxy_per_ip", "example4", "messaging", "mongo_cps", "rl"}
	if got := rs.Domains(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("domains: got %v, want %v", got, want)
	}
}

func mustLoad(t testing.TB) *RuleSet {
	t.Helper()
	rs, err := LoadRules("testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func entries(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

func TestMatch(t *testing.T) {
	rs := mustLoad(t)
	cases := []struct {
		name, domain string
		entries      []Entry
		wantID       string // "" means no rule
		wantLimit    int64
	}{
		{"exact nested", "rl", entries("source_cluster", "proxy", "destination_cluster", "mock"), "rl:source_cluster=proxy/destination_cluster=mock", 1},
		{"parent without limit", "rl", entries("source_cluster", "proxy"), "", 0},
		{"key-only default", "rl", entries("foo", "anything"), "rl:foo", 2},
		{"nested key-only", "rl", entries("foo", "x", "bar", "y"), "rl:foo/bar", 3},
		{"exact beats key-only", "rl", entries("foo", "x", "bar", "banned"), "rl:foo/bar=banned", 0},
		{"unlimited", "rl", entries("qux", "1"), "rl:qux", 0},
		{"deeper than the config", "rl", entries("qux", "1", "extra", "2"), "", 0},
		{"unknown key", "rl", entries("nope", "1"), "", 0},
		{"unknown domain", "nope", entries("foo", "1"), "", 0},
		{"no entries", "rl", nil, "", 0},
		{"wildcard", "example4", entries("foo", "foobar"), "api", 20},
		{"wildcard no match", "example4", entries("foo", "bar"), "", 0},
		{"blocklist value", "edge_proxy_per_ip", entries("remote_address", "50.0.0.5"), "edge_proxy_per_ip:remote_address=50.0.0.5", 0},
		{"other value", "edge_proxy_per_ip", entries("remote_address", "10.0.0.1"), "edge_proxy_per_ip:remote_address", 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rs.Match(c.domain, c.entries)
			switch {
			case c.wantID == "" && r != nil:
				t.Fatalf("got rule %s, want none", r.ID)
			case c.wantID == "":
			case r == nil:
				t.Fatalf("got no rule, want %s", c.wantID)
			case c.wantID != "api" && r.ID != c.wantID:
				t.Fatalf("got rule %s, want %s", r.ID, c.wantID)
			case r.Limit != c.wantLimit:
				t.Fatalf("limit: got %d, want %d", r.Limit, c.wantLimit)
			}
		})
	}
}

func TestRuleDetails(t *testing.T) {
	rs := mustLoad(t)
	shady := rs.Match("rl", entries("foo", "x", "baz", "shady"))
	if shady == nil || !shady.Shadow || shady.Unit != Minute {
		t.Fatalf("shadow rule: got %+v", shady)
	}
	k2 := rs.Match("example4", entries("key2", "v"))
	if k2 == nil || len(k2.Replaces) != 1 || k2.Replaces[0] != "key1_rate_limit" {
		t.Fatalf("replaces: got %+v", k2)
	}
	if k1 := rs.Match("example4", entries("key1", "v")); k1 == nil || k1.Name != "key1_rate_limit" {
		t.Fatalf("name: got %+v", k1)
	}
	if u := rs.Match("rl", entries("qux", "1")); u == nil || !u.Unlimited || u.Limiter != nil {
		t.Fatalf("unlimited: got %+v", u)
	}
	if d := rs.Match("mongo_cps", entries("database", "users")); d == nil || d.Mode != "async" || d.NearLimit != "sync" ||
		d.Failure != "open" || d.OnExceed != "deny" || d.Shards != 1 || d.Limiter == nil {
		t.Fatalf("defaults: got %+v", d)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	rs := mustLoad(t)
	e := entries("foo", "x", "bar", "y")
	w := entries("foo", "foobar")
	allocs := testing.AllocsPerRun(1000, func() {
		if rs.Match("rl", e) == nil || rs.Match("example4", w) == nil {
			t.Fatal("no match")
		}
	})
	if allocs != 0 {
		t.Fatalf("Match allocates %v times per call", allocs)
	}
}

func TestGlob(t *testing.T) {
	cases := []struct {
		pattern, value string
		want           bool
	}{
		{"foo*", "foo", true}, {"foo*", "foobar", true}, {"foo*", "fo", false},
		{"*bar", "foobar", true}, {"*bar", "barx", false}, {"a*b*c", "aXbYc", true},
		{"a*b*c", "aXcYb", false}, {"*", "", true}, {"**", "x", true}, {"/api/*/users", "/api/v1/users", true},
		{"/api/*/users", "/api/v1/orders", false}, {"exact", "exact", true}, {"exact", "exac", false},
	}
	for i, c := range cases {
		if got := Glob(c.pattern, c.value); got != c.want {
			t.Fatalf("case %d: Glob(%q, %q) = %v, want %v", i, c.pattern, c.value, got, c.want)
		}
	}
}

func TestAppendCounterKey(t *testing.T) {
	src := `domain: api
descriptors:
  - key: route
    value: "/v1/*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: "/v1/*"
    rate_limit: {unit: second, requests_per_unit: 5}
`
	f, err := ParseRules("w.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compile([]*File{f})
	if err != nil {
		t.Fatal(err)
	}
	shared := rs.Match("api", entries("route", "/v1/a"))
	got1 := string(AppendCounterKey(nil, shared, entries("route", "/v1/a")))
	got2 := string(AppendCounterKey(nil, shared, entries("route", "/v1/b")))
	if want := `api:route=\/v1\/*|route=\/v1\/*`; got1 != got2 || got1 != want {
		t.Fatalf("shared threshold keys: %q and %q, want both %s", got1, got2, want)
	}
	own := rs.Match("api", entries("path", "/v1/a"))
	a := string(AppendCounterKey(nil, own, entries("path", "/v1/a")))
	b := string(AppendCounterKey(nil, own, entries("path", "/v1/b")))
	if a == b {
		t.Fatalf("wildcard without share_threshold must count each value separately, both %q", a)
	}
}

func TestExtensions(t *testing.T) {
	src := `domain: api
pools:
  - name: spare
    rate_limit: {unit: hour, requests_per_unit: 5000}
descriptors:
  - key: user_id
    rate_limit: {unit: minute, requests_per_unit: 100}
    algorithm: token_bucket
    burst: 20
    throttle: {type: soft, overage_percent: 5}
    on_exceed: defer
    defer: {target: "http://orders.internal:8080", max_age: 2m, max_attempts: 3}
    mode: async
    near_limit: async
    failure: local_budget
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 100000}
    shards: 4
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 10}
    algorithm: sliding_log
    mode: sync
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
    algorithm: fixed_window
    throttle: {type: elastic, pool: spare, max_multiplier: 3}
`
	f, err := ParseRules("ext.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compile([]*File{f})
	if err != nil {
		t.Fatal(err)
	}
	u := rs.Match("api", entries("user_id", "priya"))
	if u.Algorithm != "token_bucket" || u.Burst != 20 || u.Throttle.OveragePercent != 5 || u.OnExceed != "defer" ||
		u.NearLimit != "async" || u.Failure != "local_budget" || u.Ceiling() != 105 {
		t.Fatalf("extensions: got %+v", u)
	}
	if h := rs.Match("api", entries("hot", "x")); h.Shards != 4 {
		t.Fatalf("shards: got %d", h.Shards)
	}
	if l := rs.Match("api", entries("login", "x")); l.Mode != "sync" || l.Limiter == nil {
		t.Fatalf("sliding log: got %+v", l)
	}
	if e := rs.Match("api", entries("tenant", "x")); e.Throttle.Pool != "spare" || e.Throttle.MaxMultiplier != 3 ||
		e.Pool == nil || !e.Pool.IsPool || e.Pool.Limit != 5000 || e.Ceiling() != 3000 || rs.Pool("api", "spare") != e.Pool {
		t.Fatalf("elastic: got %+v, pool %+v", e.Throttle, e.Pool)
	}
	if d := u.Defer; d.Target != "http://orders.internal:8080" || d.MaxAge != 2*time.Minute || d.MaxAttempts != 3 ||
		d.MaxPayloadBytes != DefaultDeferPayloadBytes {
		t.Fatalf("defer: got %+v", d)
	}
}

func TestRuleErrors(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"unknown field", "domain: a\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n",
			`bad.yaml:4:5: descriptor: unknown field "rate_limt"`},
		{"duplicate yaml key", "domain: a\ndomain: b\n", `bad.yaml:2:1: rule file: duplicate key "domain" (first at line 1)`},
		{"duplicate descriptor", "domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			`bad.yaml:5:5: duplicate descriptor: key "k" with value "v" is already defined at line 3`},
		{"missing domain", "descriptors: []\n", "bad.yaml:1:1: rule file: missing domain"},
		{"empty file", "", "bad.yaml: empty rule file"},
		{"missing key", "domain: a\ndescriptors:\n  - value: v\n", "bad.yaml:3:5: descriptor: missing key"},
		{"negative limit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			"bad.yaml:4:51: requests_per_unit: must not be negative"},
		{"zero limit with algorithm", "domain: a\ndescriptors:\n  - key: k\n    algorithm: gcra\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
			"bad.yaml:3:5: descriptor \"k\": requests_per_unit 0"},
		{"bad unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			`bad.yaml:4:24: unit: unknown unit "fortnight"`},
		{"unlimited with unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			"bad.yaml:4:41: rate_limit: unit must not be set when unlimited is true"},
		{"missing unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", "bad.yaml:4:17: rate_limit: missing unit"},
		{"sliding log async", "domain: a\ndescriptors:\n  - key: k\n    algorithm: sliding_log\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": algorithm sliding_log needs mode sync or local"},
		{"unknown algorithm", "domain: a\ndescriptors:\n  - key: k\n    algorithm: magic\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`bad.yaml:4:16: algorithm: unknown value "magic"`},
		{"burst on a window", "domain: a\ndescriptors:\n  - key: k\n    burst: 5\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": burst needs algorithm token_bucket"},
		{"soft without overage", "domain: a\ndescriptors:\n  - key: k\n    throttle: {type: soft}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:4:15: throttle: type soft needs overage_percent"},
		{"elastic without pool", "domain: a\ndescriptors:\n  - key: k\n    throttle: {type: elastic}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:4:15: throttle: type elastic needs a pool"},
		{"near_limit with sync", "domain: a\ndescriptors:\n  - key: k\n    mode: sync\n    near_limit: async\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": near_limit applies to mode async only"},
		{"shards with local", "domain: a\ndescriptors:\n  - key: k\n    mode: local\n    shards: 2\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": shards apply to shared counters"},
		{"too many shards", "domain: a\ndescriptors:\n  - key: k\n    shards: 1000\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:4:13: shards: must be between 1 and 64"},
		{"shards on a bucket", "domain: a\ndescriptors:\n  - key: k\n    algorithm: gcra\n    shards: 4\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": shards need a window algorithm"},
		{"shards in sync mode", "domain: a\ndescriptors:\n  - key: k\n    mode: sync\n    shards: 4\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": shards apply to mode async"},
		{"extension without rate_limit", "domain: a\ndescriptors:\n  - key: k\n    algorithm: gcra\n",
			"bad.yaml:3:5: descriptor \"k\": limit extensions"},
		{"unlimited with extension", "domain: a\ndescriptors:\n  - key: k\n    mode: sync\n    rate_limit: {unlimited: true}\n",
			"bad.yaml:3:5: descriptor \"k\": an unlimited rate_limit takes no limit extensions"},
		{"replaces itself", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: x, replaces: [{name: x}]}\n",
			"bad.yaml:4:17: rate_limit: replaces must not name the rate limit itself"},
		{"not a bool", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", `bad.yaml:4:18: shadow_mode: want true or false, got "maybe"`},
		{"yaml syntax", "domain: a\ndescriptors:\n  - key: [\n", "bad.yaml:3:1: did not find expected node content"},
		{"descriptors not a list", "domain: a\ndescriptors: {key: k}\n", "bad.yaml:2:14: descriptors: want a list, got a mapping"},
		{"defer without an algorithm", "domain: a\ndescriptors:\n  - key: k\n    on_exceed: defer\n    defer: {target: \"http://t\"}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": on_exceed defer needs an explicit algorithm"},
		{"defer without a target", "domain: a\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    on_exceed: defer\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": on_exceed defer needs defer.target"},
		{"defer block without defer", "domain: a\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    defer: {target: \"http://t\"}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": a defer block needs on_exceed: defer"},
		{"defer to a relative target", "domain: a\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    on_exceed: defer\n    defer: {target: \"/orders\"}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:6:21: defer.target: want an absolute http or https base URL"},
		{"elastic with an unknown pool", "domain: a\npools:\n  - name: p\n    rate_limit: {unit: second, requests_per_unit: 9}\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    throttle: {type: elastic, pool: q}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:6:5: descriptor \"k\": throttle.pool \"q\" is not a pool of domain \"a\" (pools: p)"},
		{"elastic in shadow mode", "domain: a\npools:\n  - name: p\n    rate_limit: {unit: second, requests_per_unit: 9}\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    shadow_mode: true\n    throttle: {type: elastic, pool: p, max_multiplier: 2}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:6:5: descriptor \"k\": elastic throttling and shadow_mode do not combine (a shadow rule refuses nothing, so it never borrows)"},
		{"elastic on a bucket", "domain: a\ndescriptors:\n  - key: k\n    algorithm: gcra\n    throttle: {type: elastic, pool: p}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": elastic throttling needs algorithm fixed_window or sliding_window"},
		{"pool without a limit", "domain: a\npools:\n  - name: p\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
			"bad.yaml:3:5: pool \"p\": a pool is a capacity"},
		{"duplicate pool", "domain: a\npools:\n  - name: p\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - name: p\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:5:5: duplicate pool \"p\": already defined at line 3"},
		{"defer in shadow", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: true\n    on_exceed: defer\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:3:5: descriptor \"k\": on_exceed defer and shadow_mode contradict"},
		{"max_queued 0", "domain: a\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    on_exceed: defer\n    defer: {target: \"http://t\", max_queued: 0}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:6:45: defer.max_queued: must be between 1 and 1000000, got 0"},
		{"max_queued too large", "domain: a\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    on_exceed: defer\n    defer: {target: \"http://t\", max_queued: 1000001}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:6:45: defer.max_queued: must be between 1 and 1000000, got 1000001"},
		{"max_queued not a number", "domain: a\ndescriptors:\n  - key: k\n    algorithm: fixed_window\n    on_exceed: defer\n    defer: {target: \"http://t\", max_queued: lots}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"bad.yaml:6:45: defer.max_queued"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRules("bad.yaml", []byte(c.src))
			if err == nil {
				t.Fatalf("parsed, want error %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}

func TestDuplicateDomainAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("domain: api\ndescriptors: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := LoadRules(dir)
	if err == nil || !strings.Contains(err.Error(), "b.yaml:1:1: domain \"api\" is already defined in") {
		t.Fatalf("got %v, want a duplicate domain error", err)
	}
}

func TestLoadRulesReportsEveryFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\nbogus: 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yml"), []byte("domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon, requests_per_unit: 1}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("ignored"), 0o644)
	_, err := LoadRules(dir)
	list, ok := err.(ErrorList)
	if !ok || len(list) != 2 {
		t.Fatalf("got %v, want two errors", err)
	}
	if !strings.HasSuffix(list[0].File, "a.yaml") || !strings.HasSuffix(list[1].File, "b.yml") {
		t.Fatalf("errors out of file order: %v", err)
	}
	if _, err := LoadRules(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing path loaded")
	}
	if _, err := LoadRules(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no *.yaml") {
		t.Fatalf("empty directory: got %v", err)
	}
}

func TestExampleRules(t *testing.T) {
	rs, err := ExampleRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range [][]Entry{entries("user_id", "priya"), entries("remote_address", "1.2.3.4"),
		entries("tenant", "acme", "route", "/export"), entries("login", "priya")} {
		if rs.Match("api", e) == nil {
			t.Fatalf("example rules do not limit %v", e)
		}
	}
}

var sinkRule *Rule

func BenchmarkMatch(b *testing.B) {
	rs := mustLoad(b)
	e := entries("foo", "x", "bar", "y")
	b.ReportAllocs()
	for b.Loop() {
		sinkRule = rs.Match("rl", e)
	}
}

func BenchmarkMatchParallel(b *testing.B) {
	rs := mustLoad(b)
	e := entries("foo", "foobar")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var r *Rule
		for pb.Next() {
			r = rs.Match("example4", e)
		}
		sinkRule = r
	})
}

func TestDropReplacedAndSameCounter(t *testing.T) {
	a := &Rule{Name: "a"}
	b := &Rule{Name: "b", Replaces: []string{"a"}}
	c := &Rule{Name: "c", Replaces: []string{"b"}}
	cases := []struct {
		in, want []*Rule
	}{
		{[]*Rule{a, b}, []*Rule{nil, b}},
		{[]*Rule{b, a, nil}, []*Rule{b, nil, nil}},
		{[]*Rule{a, b, c}, []*Rule{nil, nil, c}}, // every listed name goes, also one that replaces
		{[]*Rule{a, {Replaces: []string{""}}}, []*Rule{a, {Replaces: []string{""}}}},
	}
	for i, cs := range cases {
		DropReplaced(cs.in)
		for j := range cs.in {
			if (cs.in[j] == nil) != (cs.want[j] == nil) {
				t.Fatalf("step %d: rule %d kept=%v, want kept=%v", i, j, cs.in[j] != nil, cs.want[j] != nil)
			}
		}
	}
	shared := &Rule{Shared: []bool{false, true}}
	e := func(kv ...string) []Entry {
		var out []Entry
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, Entry{kv[i], kv[i+1]})
		}
		return out
	}
	for i, cs := range []struct {
		a, b []Entry
		r    *Rule
		want bool
	}{
		{e("k", "1"), e("k", "1"), &Rule{}, true},
		{e("k", "1"), e("k", "2"), &Rule{}, false},
		{e("k", "1", "p", "x1"), e("k", "1", "p", "x2"), shared, true},
		{e("k", "1", "p", "x1"), e("k", "2", "p", "x1"), shared, false},
		{e("k", "1"), e("k", "1", "p", "x"), shared, false},
	} {
		if got := SameCounter(cs.a, cs.b, cs.r); got != cs.want {
			t.Fatalf("step %d: got %v, want %v", i, got, cs.want)
		}
	}
}

// TestDefaultMaxQueued: issue 19, item 7. A deferring rule queues per
// key, unless its defer block says otherwise, what it can release within
// max_age: its ceiling (or bucket) per window for every window max_age
// touches, at most DefaultDeferQueuedCap, at least 1; an explicit
// max_queued stands.
func TestDefaultMaxQueued(t *testing.T) {
	cases := []struct {
		name, rule string
		want       int64
	}{
		{"1/hour, 10m", "algorithm: fixed_window\n    rate_limit: {unit: hour, requests_per_unit: 1}\n    defer: {target: \"http://t\"}", 1},
		{"5/minute, 10m", "algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    defer: {target: \"http://t\"}", 50},
		{"5/minute, 90s: two windows", "algorithm: sliding_window\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    defer: {target: \"http://t\", max_age: 90s}", 10},
		{"soft: its ceiling", "algorithm: fixed_window\n    throttle: {type: soft, overage_percent: 100}\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    defer: {target: \"http://t\"}", 100},
		{"a bucket's burst", "algorithm: token_bucket\n    burst: 40\n    rate_limit: {unit: hour, requests_per_unit: 5}\n    defer: {target: \"http://t\"}", 40},
		{"10/second, 10m", "algorithm: fixed_window\n    rate_limit: {unit: second, requests_per_unit: 10}\n    defer: {target: \"http://t\"}", 6000},
		{"100/second, 10m: capped", "algorithm: fixed_window\n    rate_limit: {unit: second, requests_per_unit: 100}\n    defer: {target: \"http://t\"}", DefaultDeferQueuedCap},
		{"a huge limit: capped, no overflow", "algorithm: fixed_window\n    rate_limit: {unit: second, requests_per_unit: 4611686018427387904}\n    defer: {target: \"http://t\", max_age: 168h}", DefaultDeferQueuedCap},
		{"explicit", "algorithm: fixed_window\n    rate_limit: {unit: second, requests_per_unit: 10}\n    defer: {target: \"http://t\", max_queued: 7}", 7},
	}
	for i, c := range cases {
		src := "domain: a\ndescriptors:\n  - key: k\n    on_exceed: defer\n    " + c.rule + "\n"
		f, err := ParseRules("q.yaml", []byte(src))
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, c.name, err)
		}
		rs, err := Compile([]*File{f})
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, c.name, err)
		}
		if got := rs.Match("a", entries("k", "v")).Defer.MaxQueued; got != c.want {
			t.Errorf("step %d (%s): max_queued %d, want %d", i, c.name, got, c.want)
		}
	}
}
