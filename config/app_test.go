package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadAppDefaultsWithoutFile(t *testing.T) {
	a, err := LoadApp("", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if a.HTTP.Addr != ":8080" || a.GRPC.Addr != ":8081" || a.Kafka.Topic == "" || a.ClickHouse.Database != "velvetrope" ||
		a.InstanceID == "" || a.Limiter.MaxKeys != 1<<20 || a.HTTP.MaxInFlight != 256 || a.GRPC.MaxConcurrentStreams != 256 ||
		a.GRPC.CallTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v", a)
	}
}

func TestLoadAppFileAndEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "velvetrope.yaml")
	os.WriteFile(path, []byte("instance_id: a1\nhttp:\n  addr: 127.0.0.1:9000\nrules_reload: 2s\nredis:\n  addrs: [127.0.0.1:6379]\n"), 0o644)
	a, err := LoadApp(path, env(map[string]string{
		"VELVETROPE_REDIS_ADDRS":     "127.0.0.1:7000, 127.0.0.1:7001,127.0.0.1:7002",
		"VELVETROPE_KAFKA_BROKERS":   "127.0.0.1:9092",
		"VELVETROPE_CLICKHOUSE_ADDR": "127.0.0.1:9000",
		"VELVETROPE_RULES":           "/etc/rules,/etc/more",
		"VELVETROPE_GRPC_ADDR":       ":9191",
		"VELVETROPE_INSTANCE_ID":     "checker-7",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if a.InstanceID != "checker-7" || a.HTTP.Addr != "127.0.0.1:9000" || a.RulesReload != 2*time.Second ||
		len(a.Redis.Addrs) != 3 || a.Redis.Addrs[1] != "127.0.0.1:7001" || a.Kafka.Brokers[0] != "127.0.0.1:9092" ||
		a.ClickHouse.Addr != "127.0.0.1:9000" || len(a.Rules) != 2 || a.GRPC.Addr != ":9191" {
		t.Fatalf("got %+v", a)
	}
}

// TestLoadAppErrors pins the whole text of each error: where the value
// came from (FILE:LINE:COLUMN of its key, the variable, the flag), the
// key path, and what is wrong.
func TestLoadAppErrors(t *testing.T) {
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown field", "http:\n  adr2: x\n", nil,
			"c.yaml:2:3: http.adr2: unknown field; known: addr, tls, max_body_bytes, read_timeout, write_timeout, max_in_flight, max_body_bytes_in_flight"},
		{"unknown field three deep", "kafka:\n  sasl:\n    mechanizm: plain\n", nil,
			"c.yaml:3:5: kafka.sasl.mechanizm: unknown field; known: mechanism, username, password"},
		{"unknown field in a flow mapping", "redis: {tls: {enable: true}}\n", nil,
			"c.yaml:1:15: redis.tls.enable: unknown field; known: enabled, ca_file, cert_file, key_file, server_name"},
		{"unknown top-level field", "rule_reload: 2s\n", nil,
			"c.yaml:1:1: rule_reload: unknown field; known: instance_id, rules, rules_reload, rules_store, xds, http, grpc, redis, kafka, clickhouse, limiter, checker, aggregator, deferred, admin, limits, analytics, debug"},
		{"a word for a duration", "rules_reload: soon\n", nil,
			`c.yaml:1:15: rules_reload: want a duration such as 250ms, 5s or 1h30m, got "soon"`},
		{"a number for a duration", "http:\n  read_timeout: 5\n", nil,
			"c.yaml:2:17: http.read_timeout: want a duration such as 250ms, 5s or 1h30m, got 5"},
		{"a size for an integer", "deferred:\n  max_bytes: 64MiB\n", nil,
			`c.yaml:2:14: deferred.max_bytes: want an integer from -9223372036854775808 to 9223372036854775807, got "64MiB"`},
		{"an integer out of range", "checker:\n  max_keys: 99999999999999999999\n", nil,
			"c.yaml:2:13: checker.max_keys: want an integer from -9223372036854775808 to 9223372036854775807, got 99999999999999999999"},
		// yaml.v3 read 1.5 as 1 and a quoted "yes" as true
		{"a fraction for an integer", "checker:\n  max_keys: 1.5\n", nil,
			"c.yaml:2:13: checker.max_keys: want an integer from -9223372036854775808 to 9223372036854775807, got 1.5"},
		{"a quoted yes for a bool", "grpc:\n  reflection: \"yes\"\n", nil,
			`c.yaml:2:15: grpc.reflection: want true or false, got "yes"`},
		{"a word for a bool", "grpc:\n  response_headers: sometimes\n", nil,
			`c.yaml:2:21: grpc.response_headers: want true or false, got "sometimes"`},
		{"a list for a string", "instance_id: [a, b]\n", nil, "c.yaml:1:14: instance_id: want a string, got a list"},
		{"a string for a list", "redis:\n  addrs: 127.0.0.1:6379\n", nil, `c.yaml:2:10: redis.addrs: want a list, got "127.0.0.1:6379"`},
		{"a mapping inside a list", "kafka:\n  brokers: [127.0.0.1:9092, {host: k}]\n", nil, "c.yaml:2:29: kafka.brokers[1]: want a string, got a mapping"},
		{"a scalar for a section", "http: 8080\n", nil, "c.yaml:1:7: http: want a mapping, got 8080"},
		{"not a mapping at all", "just words\n", nil, `c.yaml:1:1: (top level): want a mapping, got "just words"`},
		{"a key set twice", "http:\n  addr: :1\n  addr: :2\n", nil, "c.yaml:3:3: http.addr: set twice (first at line 2)"},
		{"a syntax error", "http:\n  addr: [\n", nil, "c.yaml:2:1: did not find expected node content"},
		{"validation, from the file", "checker:\n  control_poll: 1ms\n", nil, "c.yaml:2:3: checker.control_poll: must be in [10ms, 1h], got 1ms"},
		{"validation of a list item, from the file", "redis:\n  addrs:\n    - 127.0.0.1:6379\n    - localhost\n", nil,
			`c.yaml:4:7: redis.addrs[1]: want host:port, got "localhost" (address localhost: missing port in address)`},
		{"validation of two keys, the second in the file", "checker:\n  pipeline_lag: 10ms\n", nil,
			"c.yaml:2:3: checker.flush_interval/pipeline_lag: want flush_interval <= pipeline_lag (the lag includes the flush), got 50ms and 10ms"},
		{"validation of a key the file leaves at its default: its section", "checker:\n  flush_interval: 2s\n", nil,
			"c.yaml:2:3: checker.max_emit_interval/flush_interval: want flush_interval <= max_emit_interval <= 1m, got 1s and 2s"},
		{"validation, from the environment", "", map[string]string{"VELVETROPE_HTTP_ADDR": "8080"},
			`VELVETROPE_HTTP_ADDR: http.addr: want host:port, got "8080" (address 8080: missing port in address)`},
		{"the environment over the file", "http:\n  addr: 127.0.0.1:80\n", map[string]string{"VELVETROPE_HTTP_ADDR": "8080"},
			`VELVETROPE_HTTP_ADDR: http.addr: want host:port, got "8080" (address 8080: missing port in address)`},
		{"a list item from the environment", "redis:\n  addrs: [127.0.0.1:1]\n", map[string]string{"VELVETROPE_REDIS_ADDRS": "127.0.0.1:6379, localhost"},
			`VELVETROPE_REDIS_ADDRS: redis.addrs[1]: want host:port, got "localhost" (address localhost: missing port in address)`},
		// a token no HTTP header can carry locked the endpoints out in silence
		{"an admin token with a blank", "", map[string]string{"VELVETROPE_ADMIN_TOKEN": "abc "},
			"VELVETROPE_ADMIN_TOKEN: admin.token: must be printable ASCII without spaces (a bearer token in an HTTP header), got 4 bytes that are not"},
		{"an analytics token with a newline", "analytics:\n  token: \"a\\nb\"\n", nil,
			"c.yaml:2:3: analytics.token: must be printable ASCII without spaces (a bearer token in an HTTP header), got 3 bytes that are not"},
		{"a blank admin token", "admin:\n  token: \" \"\n", nil,
			"c.yaml:2:3: admin.token: must be printable ASCII without spaces (a bearer token in an HTTP header), got 1 bytes that are not"},
		{"bad port", "", map[string]string{"VELVETROPE_KAFKA_BROKERS": "h:99999"}, `VELVETROPE_KAFKA_BROKERS: kafka.brokers[0]: want host:port with a port from 0 to 65535, got "h:99999"`},
		{"bad instance", "", map[string]string{"VELVETROPE_INSTANCE_ID": "a b"}, `VELVETROPE_INSTANCE_ID: instance_id: must be 1 to 200 bytes without spaces, '/' or '|', got "a b"`},
		{"zero max keys", "limiter:\n  max_keys: 0\n", nil, "c.yaml:2:3: limiter.max_keys: must be at least 64, got 0"},
		{"zero descriptors", "limits:\n  max_descriptors: 0\n", nil, "c.yaml:2:3: limits.max_descriptors: must be between 1 and 32, got 0"},
		{"unknown sasl", "kafka:\n  sasl: {mechanism: gssapi, username: u}\n", nil, `c.yaml:2:10: kafka.sasl.mechanism: want plain, scram-sha-256 or scram-sha-512, got "gssapi"`},
		{"sasl without user", "kafka:\n  sasl: {mechanism: plain}\n", nil, "c.yaml:2:3: kafka.sasl.username: must not be empty with mechanism plain"},
		{"tls half a pair", "redis:\n  tls: {enabled: true, cert_file: c.pem}\n", nil, "c.yaml:2:3: redis.tls: cert_file and key_file go together"},
		{"tls files while off", "kafka:\n  tls: {ca_file: ca.pem}\n", nil, "c.yaml:2:3: kafka.tls: files or server_name are set but enabled is false"},
		{"unknown compression", "kafka:\n  compression: brotli\n", nil, `c.yaml:2:3: kafka.compression: want lz4, zstd, snappy, gzip or none, got "brotli"`},
		{"drain without workers", "deferred:\n  workers: 0\n", nil, "c.yaml:2:3: deferred.workers: must be between 1 and 4096, got 0"},
		{"drain backoff inverted", "deferred:\n  backoff_min: 1s\n  backoff_max: 10ms\n", nil,
			"c.yaml:2:3: deferred.backoff_min/backoff_max: want backoff_min >= 1ms and backoff_max >= backoff_min, got 1s and 10ms"},
		{"gRPC streams beyond", "grpc:\n  max_concurrent_streams: 2000000\n", nil, "c.yaml:2:3: grpc.max_concurrent_streams: must be between 1 and 1000000, got 2000000"},
		{"call timeout a day", "grpc:\n  call_timeout: 24h\n", nil, "c.yaml:2:3: grpc.call_timeout: must be in [1ms, 1h], got 24h0m0s"},
		{"deferred max_bytes too small", "deferred:\n  max_bytes: 1000\n", nil, "c.yaml:2:3: deferred.max_bytes: must be between 1 MiB and 1 TiB (1048576 to 1099511627776), got 1000"},
		{"xds TLS flag from the environment", "", map[string]string{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "yes please"},
			`CONFIG_GRPC_XDS_SERVER_USE_TLS: xds.tls.enabled: want true or false, got "yes please"`},
		{"xds from Envoy's variables", "", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_ID": "rl-1"},
			`xds.server_url: want the control plane's host:port with GRPC_XDS_SOTW (CONFIG_GRPC_XDS_SERVER_URL), got ""`},
		{"xds without a node", "xds: {config_type: GRPC_XDS_SOTW, server_url: \"cp:18000\"}\n", nil, "c.yaml:1:1: xds.node_id: required with GRPC_XDS_SOTW (CONFIG_GRPC_XDS_NODE_ID): the name this process gives the control plane"},
		{"xds config type", "xds: {config_type: GRPC_XDS_DELTA}\n", nil, `c.yaml:1:7: xds.config_type: want FILE or GRPC_XDS_SOTW (Envoy's ratelimit service's CONFIG_TYPE), got "GRPC_XDS_DELTA"`},
		{"rules store backend", "rules_store:\n  backend: etcd\n", nil, `c.yaml:2:3: rules_store.backend: want "redis", "memory" or nothing (rule files only), got "etcd"`},
		{"rules store age under its poll", "rules_store:\n  poll: 10s\n  max_age: 1s\n", nil,
			"c.yaml:3:3: rules_store.max_age: must be 0 (no bound) or at least rules_store.poll (10s), got 1s"},
		{"rules store history", "rules_store: {history: 0}\n", nil, "c.yaml:1:15: rules_store.history: must be between 1 and 10000, got 0"},
		{"every problem, one line each", "http:\n  adr: x\n  max_in_flight: lots\ndeferred:\n  worker: 3\n", nil,
			"c.yaml:2:3: http.adr: unknown field; known: addr, tls, max_body_bytes, read_timeout, write_timeout, max_in_flight, max_body_bytes_in_flight\n" +
				`c.yaml:3:18: http.max_in_flight: want an integer from -9223372036854775808 to 9223372036854775807, got "lots"` + "\n" +
				"c.yaml:5:3: deferred.worker: unknown field; known: group, workers, max_in_flight, delivery_timeout, backoff_min, backoff_max, state_retention, max_bytes"},
		{"every invalid value", "http:\n  max_in_flight: 0\ngrpc:\n  call_timeout: 0s\n", nil,
			"c.yaml:2:3: http.max_in_flight: must be between 1 and 1000000, got 0\nc.yaml:4:3: grpc.call_timeout: must be in [1ms, 1h], got 0s"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir) // errors name the file as given
			if err := os.WriteFile("c.yaml", []byte(c.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadApp("c.yaml", env(c.env))
			if err == nil || err.Error() != c.want {
				t.Fatalf("step %d: got\n%v\nwant\n%s", i, err, c.want)
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) != strings.Count(c.want, "\n")+1 {
				t.Fatalf("step %d: got %T %d problems, want an ErrorList of %d", i, err, len(list), strings.Count(c.want, "\n")+1)
			}
		})
	}
	t.Chdir(t.TempDir())
	if _, err := LoadApp("missing.yaml", env(nil)); err == nil || err.Error() != "missing.yaml: no such file or directory" {
		t.Fatalf("missing file: got %v", err)
	}
}

// TestLoadAppOverrides: an override (a flag) is applied over the file and
// the environment before validation: it replaces a bad value there, and a
// bad value of its own is named by its From.
func TestLoadAppOverrides(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("c.yaml", []byte("http:\n  addr: nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set := func(addr string) Override {
		return Override{Key: "http.addr", From: "--http", Set: func(a *App) { a.HTTP.Addr = addr }}
	}
	cases := []struct {
		name string
		env  map[string]string
		ov   []Override
		want string // the error; "" none
	}{
		{"none: the file's bad value", nil, nil, "c.yaml:2:3: http.addr: want host:port, got \"nope\" (address nope: missing port in address)"},
		{"the environment replaces the file's bad value", map[string]string{"VELVETROPE_HTTP_ADDR": "127.0.0.1:9"}, nil, ""},
		{"replaces the file's bad value", nil, []Override{set("127.0.0.1:9")}, ""},
		{"replaces the environment's bad value", map[string]string{"VELVETROPE_HTTP_ADDR": "8080"}, []Override{set("127.0.0.1:9")}, ""},
		{"its own bad value", map[string]string{"VELVETROPE_HTTP_ADDR": "127.0.0.1:9"}, []Override{set("9090")},
			`--http: http.addr: want host:port, got "9090" (address 9090: missing port in address)`},
	}
	for i, c := range cases {
		a, err := LoadApp("c.yaml", env(c.env), c.ov...)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Fatalf("step %d (%s): got %q, want %q", i, c.name, got, c.want)
		}
		if c.want == "" && a.HTTP.Addr == "nope" {
			t.Fatalf("step %d (%s): the override was not applied: %q", i, c.name, a.HTTP.Addr)
		}
	}
}

// TestLoadAppMergeKeys: YAML merge keys (<<) apply, the keys written out
// over what they merge; a key merged where it is unknown is reported at
// its line, by the key path it was merged into.
func TestLoadAppMergeKeys(t *testing.T) {
	t.Chdir(t.TempDir())
	doc := "http: &l\n  addr: 127.0.0.1:7000\n  read_timeout: 3s\ngrpc:\n  <<: {addr: 127.0.0.1:7001, response_headers: true}\n  addr: 127.0.0.1:7002\n"
	if err := os.WriteFile("c.yaml", []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := LoadApp("c.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if a.HTTP.Addr != "127.0.0.1:7000" || a.HTTP.ReadTimeout != 3*time.Second || a.GRPC.Addr != "127.0.0.1:7002" || !a.GRPC.ResponseHeaders {
		t.Fatalf("got http %+v, grpc %+v", a.HTTP, a.GRPC)
	}
	doc = "http: &l\n  addr: 127.0.0.1:7000\n  read_timeout: 3s\ngrpc:\n  <<: *l\n"
	if err := os.WriteFile("c.yaml", []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "c.yaml:3:3: grpc.read_timeout: unknown field; known: addr, tls, response_headers, max_concurrent_streams, call_timeout, reflection"
	if _, err := LoadApp("c.yaml", env(nil)); err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestResolveStateDir(t *testing.T) {
	base := t.TempDir()
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	cases := []struct {
		name, configured string
		env              map[string]string
		want, wantErr    string
	}{
		{"configured, created 0700", filepath.Join(base, "a", "b"), nil, filepath.Join(base, "a", "b"), ""},
		{"systemd's STATE_DIRECTORY", "", map[string]string{"STATE_DIRECTORY": filepath.Join(base, "sd") + ":/other"}, filepath.Join(base, "sd"), ""},
		{"a directory every user may write to is refused", open, nil, "", "writable by every user"},
	}
	for i, c := range cases {
		got, err := ResolveStateDir(c.configured, env(c.env))
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("step %d (%s): got %q %v, want error %q", i, c.name, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Fatalf("step %d (%s): got %q %v, want %q", i, c.name, got, err, c.want)
		}
		if info, err := os.Stat(got); err != nil || info.Mode().Perm() != 0o700 {
			t.Fatalf("step %d: %s mode %v %v, want 0700", i, got, info.Mode().Perm(), err)
		}
	}
}

// TestGRPCReflectionSetting: server reflection is on unless the file says
// grpc.reflection: false.
func TestGRPCReflectionSetting(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct {
		file string
		want bool
	}{
		{"", true},
		{"grpc:\n  addr: :9191\n", true},
		{"grpc:\n  reflection: false\n", false},
		{"grpc:\n  reflection: true\n", true},
	} {
		path := ""
		if c.file != "" {
			path = filepath.Join(dir, "app.yaml")
			if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		a, err := LoadApp(path, env(nil))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if a.GRPC.Reflection != c.want {
			t.Fatalf("step %d (%q): grpc.reflection %v, want %v", i, c.file, a.GRPC.Reflection, c.want)
		}
	}
}
