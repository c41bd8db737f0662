package config

import (
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

func TestLoadAppErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown field", "http:\n  adr: x\n", nil, "velvetrope.yaml:2:1: field adr not found"},
		{"bad duration", "rules_reload: soon\n", nil, "velvetrope.yaml:1:1:"},
		{"bad http addr env", "", map[string]string{"VELVETROPE_HTTP_ADDR": "8080"}, "http.addr (VELVETROPE_HTTP_ADDR): want host:port"},
		{"bad redis addr", "", map[string]string{"VELVETROPE_REDIS_ADDRS": "localhost"}, "redis.addrs (VELVETROPE_REDIS_ADDRS)"},
		{"bad port", "", map[string]string{"VELVETROPE_KAFKA_BROKERS": "h:99999"}, "kafka.brokers (VELVETROPE_KAFKA_BROKERS): bad port"},
		{"bad instance", "", map[string]string{"VELVETROPE_INSTANCE_ID": "a b"}, "instance_id (VELVETROPE_INSTANCE_ID)"},
		{"zero max keys", "limiter:\n  max_keys: 0\n", nil, "limiter.max_keys: must be at least 64"},
		{"unknown sasl", "kafka:\n  sasl: {mechanism: gssapi, username: u}\n", nil, `kafka.sasl.mechanism: want plain, scram-sha-256 or scram-sha-512, got "gssapi"`},
		{"sasl without user", "kafka:\n  sasl: {mechanism: plain}\n", nil, "kafka.sasl.username: must not be empty"},
		{"tls half a pair", "redis:\n  tls: {enabled: true, cert_file: c.pem}\n", nil, "redis.tls: cert_file and key_file go together"},
		{"tls files while off", "kafka:\n  tls: {ca_file: ca.pem}\n", nil, "kafka.tls: files or server_name are set but enabled is false"},
		{"http tls half", "http:\n  tls: {key_file: k.pem}\n", nil, "http.tls: cert_file and key_file go together"},
		{"unknown compression", "kafka:\n  compression: brotli\n", nil, `kafka.compression: want lz4, zstd, snappy, gzip or none, got "brotli"`},
		{"control poll too fast", "checker:\n  control_poll: 1ms\n", nil, "checker.control_poll: must be in [10ms, 1h], got 1ms"},
		{"drain without workers", "deferred:\n  workers: 0\n", nil, "deferred.workers: must be between 1 and 4096, got 0"},
		{"drain backoff inverted", "deferred:\n  backoff_min: 1s\n  backoff_max: 10ms\n", nil, "deferred.backoff_min/backoff_max: want backoff_min >= 1ms and backoff_max >= backoff_min, got 1s and 10ms"},
		{"unknown deferred field", "deferred:\n  worker: 3\n", nil, "field worker not found"},
		{"no requests in flight", "http:\n  max_in_flight: 0\n", nil, "http.max_in_flight: must be between 1 and 1000000, got 0"},
		{"no gRPC streams", "grpc:\n  max_concurrent_streams: 0\n", nil, "grpc.max_concurrent_streams: must be between 1 and 1000000, got 0"},
		{"gRPC streams beyond", "grpc:\n  max_concurrent_streams: 2000000\n", nil, "grpc.max_concurrent_streams: must be between 1 and 1000000"},
		{"call timeout zero", "grpc:\n  call_timeout: 0s\n", nil, "grpc.call_timeout: must be in [1ms, 1h], got 0s"},
		{"call timeout a day", "grpc:\n  call_timeout: 24h\n", nil, "grpc.call_timeout: must be in [1ms, 1h], got 24h0m0s"},
		{"deferred max_bytes too small", "deferred:\n  max_bytes: 1000\n", nil, "deferred.max_bytes: must be between 1 MiB and 1 TiB (1048576 to 1099511627776), got 1000"},
		{"deferred max_bytes too large", "deferred:\n  max_bytes: 2199023255552\n", nil, "deferred.max_bytes: must be between 1 MiB and 1 TiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "velvetrope.yaml")
			os.WriteFile(path, []byte(c.file), 0o644)
			_, err := LoadApp(path, env(c.env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want it to contain %q", err, c.want)
			}
		})
	}
	if _, err := LoadApp(filepath.Join(dir, "missing.yaml"), env(nil)); err == nil {
		t.Fatal("missing file accepted")
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
