package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/velvetrope/velvetrope/limiter"
)

// App is the process configuration: listeners, backends, rule paths and
// timings. Every field has a default, so a process starts with no file.
type App struct {
	// InstanceID names this process in events and metrics; default: the
	// host name. A per-start nonce is added where identity must be unique.
	InstanceID string `yaml:"instance_id"`
	// Rules are rule files or directories; empty means the built-in example
	// rules (velvetrope dev only).
	Rules       []string      `yaml:"rules"`
	RulesReload time.Duration `yaml:"rules_reload"` // poll interval of the rules watcher

	HTTP       HTTPConfig       `yaml:"http"`
	GRPC       GRPCConfig       `yaml:"grpc"`
	Redis      RedisConfig      `yaml:"redis"`
	Kafka      KafkaConfig      `yaml:"kafka"`
	ClickHouse ClickHouseConfig `yaml:"clickhouse"`
	Limiter    LimiterConfig    `yaml:"limiter"`
	Checker    CheckerConfig    `yaml:"checker"`
	Aggregator AggregatorConfig `yaml:"aggregator"`
	Deferred   DeferredConfig   `yaml:"deferred"`
	Admin      AdminConfig      `yaml:"admin"`
	Limits     LimitsConfig     `yaml:"limits"`
	Analytics  AnalyticsConfig  `yaml:"analytics"`
	Debug      DebugConfig      `yaml:"debug"`
}

// DebugConfig exposes what operators profile with.
type DebugConfig struct {
	// PprofAddr, when set, serves Go's /debug/pprof/ on this address, a
	// listener of its own: keep it on loopback or a private network (a
	// profile shows what the process holds).
	PprofAddr string `yaml:"pprof_addr"`
}

// AnalyticsConfig protects the analytics endpoints (they name who is being
// limited) and bounds what they may ask of ClickHouse.
type AnalyticsConfig struct {
	// Token, when set, is required as a bearer token by /v1/analytics/*
	// and asked for by the dashboard. Never logged.
	Token         string        `yaml:"token"`
	MaxWindow     time.Duration `yaml:"max_window"`     // longest window a query covers (7 days, at most 31)
	MaxConcurrent int           `yaml:"max_concurrent"` // queries at once; more answer 503 (8: a dashboard asks 3 at a time)
	// MemoryMaxBytes bounds `velvetrope dev`'s in-memory usage rows (64
	// MiB); past it the oldest minutes' rows are dropped, counted.
	MemoryMaxBytes int64 `yaml:"memory_max_bytes"`
}

// LimitsConfig bounds the size of one request on every surface (HTTP,
// gRPC, middleware) and in both engines, which take it as their Bounds: a
// request outside them is refused naming the field. [LimitsConfig.Validate]
// also refuses bounds that would let a request make a delta larger than
// the pipeline's record bound (max_entries × (max_key_bytes +
// max_value_bytes + 2) at most 12 KiB, [MaxDescriptorBytes]). Defaults:
// [DefaultLimits]; zero fields take them ([LimitsConfig.WithDefaults]).
type LimitsConfig struct {
	MaxDescriptors    int `yaml:"max_descriptors"`      // per request (16, at most MaxDescriptors)
	MaxEntries        int `yaml:"max_entries"`          // per descriptor (8, at most MaxEntries)
	MaxKeyBytes       int `yaml:"max_key_bytes"`        // one entry's key (128)
	MaxValueBytes     int `yaml:"max_value_bytes"`      // one entry's value (1024)
	MaxRequestIDBytes int `yaml:"max_request_id_bytes"` // request_id (128)
}

// TLSConfig turns a listener to TLS: CertFile and KeyFile (PEM) together;
// ClientCAFile additionally requires client certificates signed by it
// (mutual TLS). All empty: plaintext.
type TLSConfig struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether the listener serves TLS.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" }

// AdminConfig protects the admin endpoints that change state.
type AdminConfig struct {
	// Token is the bearer token those endpoints require; empty disables
	// them (they answer 403). Never logged.
	Token string `yaml:"token"`
}

// AggregatorConfig tunes the Kafka aggregator; the consumer timeouts are
// short by default so that a dead aggregator's partitions move within
// seconds.
type AggregatorConfig struct {
	Group             string        `yaml:"group"`
	BatchSize         int           `yaml:"batch_size"`
	BatchWait         time.Duration `yaml:"batch_wait"`
	SessionTimeout    time.Duration `yaml:"session_timeout"`
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	RebalanceTimeout  time.Duration `yaml:"rebalance_timeout"`
	// RedisTimeout is the read and write timeout of the aggregator's Redis
	// client (5 s): one apply carries a whole batch.
	RedisTimeout time.Duration `yaml:"redis_timeout"`
}

// DeferredConfig tunes `velvetrope drain`, which releases and delivers
// deferred requests (the topic is kafka.deferred_topic; dead letters go
// to that name + ".dlq").
type DeferredConfig struct {
	Group           string        `yaml:"group"`            // the drains' consumer group (velvetrope-drain)
	Workers         int           `yaml:"workers"`          // deliveries at once per drain (16)
	MaxInFlight     int           `yaml:"max_in_flight"`    // items one drain holds in memory (10000)
	DeliveryTimeout time.Duration `yaml:"delivery_timeout"` // one delivery attempt (10s)
	BackoffMin      time.Duration `yaml:"backoff_min"`      // the first retry's wait (200ms)
	BackoffMax      time.Duration `yaml:"backoff_max"`      // the longest wait between attempts (30s)
	// StateRetention is how long a ticket's state stays readable after
	// its deadline (24h).
	StateRetention time.Duration `yaml:"state_retention"`
	// MaxBytes bounds the deferred items queued and not yet finished, in
	// all (every key, every checker: counted in the counter store), in
	// bytes of their records (64 MiB); past it a request that would be
	// deferred is refused. It is also what a drain can hold in memory,
	// and dev's in-memory topic.
	MaxBytes int64 `yaml:"max_bytes"`
}

// DefaultDeferredMaxBytes is deferred.max_bytes unless set: a deferred
// queue is an overflow valve, not a store, and a drain holds what is
// queued in memory.
const DefaultDeferredMaxBytes = 64 << 20

// CheckerConfig tunes the async checker (checker.Config embeds it).
// docs/configuration.md explains each setting under its name, checker.*.
type CheckerConfig struct {
	MaxKeys  int   `yaml:"max_keys"`  // counter keys held in memory (1<<20)
	MaxBytes int64 `yaml:"max_bytes"` // the key table's heap, as estimated per key (1 GiB; 0: max_keys alone)
	// FlushInterval: how often deltas are emitted (50 ms); MaxEmitInterval:
	// how long a key far from its limit may hold its consumption (1 s).
	FlushInterval   time.Duration `yaml:"flush_interval"`
	MaxEmitInterval time.Duration `yaml:"max_emit_interval"`
	// MaxHeldHits, MaxHeldTotal: the most such keys hold back, per key
	// (256) and in all (1<<20; each lock shard its share): what a kill -9
	// loses beside one flush.
	MaxHeldHits  int64 `yaml:"max_held_hits"`
	MaxHeldTotal int64 `yaml:"max_held_hits_total"`
	// MinRefresh is a key's shortest re-read interval (50 ms); every
	// tracked key is re-read at least every MaxRefresh (5 s); PipelineLag
	// is the expected delay from admission to the store (250 ms).
	MinRefresh  time.Duration `yaml:"min_refresh"`
	MaxRefresh  time.Duration `yaml:"max_refresh"`
	PipelineLag time.Duration `yaml:"pipeline_lag"`
	// The near band's width is max(NearFloor (2), limit × NearFloorPct (1)
	// / 100, the fleet's rate × (MinRefresh + PipelineLag) × SafetyPercent
	// (200) / 100).
	SafetyPercent int64         `yaml:"safety_percent"`
	NearFloor     int64         `yaml:"near_floor"`
	NearFloorPct  int64         `yaml:"near_floor_percent"`
	IdleAfter     time.Duration `yaml:"idle_after"`   // a clean key unused this long is dropped (2 min)
	ControlPoll   time.Duration `yaml:"control_poll"` // how often operator controls are re-read (1 s)
	// Heartbeat: how often a checker lists itself in the store's registry
	// of live checkers (1 s), where it stays InstanceTTL (3 heartbeats);
	// each reads the store's clock, which the checker's is kept within
	// MaxClockSkew of (100 ms).
	Heartbeat    time.Duration `yaml:"heartbeat"`
	InstanceTTL  time.Duration `yaml:"instance_ttl"`
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// StoreTimeout is the deadline of one decision's store calls and of
	// one refresh read (150 ms): past it the rule's failure policy
	// decides. After BreakerFailures consecutive failures (5) no call is
	// made for BreakerOpenFor (1 s).
	StoreTimeout    time.Duration `yaml:"store_timeout"`
	BreakerFailures int64         `yaml:"breaker_failures"`
	BreakerOpenFor  time.Duration `yaml:"breaker_open_for"`
	// StateDir holds files that must survive a restart (the spill file,
	// <instance_id>.spill). Empty: $STATE_DIRECTORY (systemd), else
	// /var/lib/velvetrope when it exists or can be made, else
	// $XDG_STATE_HOME/velvetrope (~/.local/state/velvetrope). SpillPath,
	// when set, names the spill file itself. These and TopicPartitions
	// are the process's (the library has no spill file).
	StateDir        string `yaml:"state_dir"`
	SpillPath       string `yaml:"spill_path"`
	SpillMaxBytes   int64  `yaml:"spill_max_bytes"`
	TopicPartitions int    `yaml:"topic_partitions"`
	// HashKey keys the hash of hash_values entries; every checker that
	// shares counters needs the same secret (empty: a random key per
	// process). Never logged.
	HashKey string `yaml:"hash_key"`
}

// HTTPConfig is the one HTTP listener of a process.
type HTTPConfig struct {
	Addr         string        `yaml:"addr"`
	TLS          TLSConfig     `yaml:"tls"`
	MaxBodyBytes int64         `yaml:"max_body_bytes"`
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxInFlight bounds the requests the listener decides at once, once
	// their bodies have arrived (256; /healthz, /readyz and /metrics not
	// counted); one more is answered 503 with Retry-After.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxBodyBytesInFlight bounds the memory of the request bodies being
	// received or decided, all together (64 MiB, at least max_body_bytes):
	// a body whose next bytes do not fit is answered 503. A slow client
	// holds only what it has sent.
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight"`
}

// GRPCConfig is the Envoy rate limit service listener; an empty Addr
// disables it.
type GRPCConfig struct {
	Addr string    `yaml:"addr"`
	TLS  TLSConfig `yaml:"tls"`
	// ResponseHeaders fills response_headers_to_add (RateLimit-Policy,
	// RateLimit, X-RateLimit-*, Retry-After) for Envoy to forward.
	ResponseHeaders bool `yaml:"response_headers"`
	// MaxConcurrentStreams bounds the calls one connection carries at
	// once (256); CallTimeout is the furthest deadline a call may have
	// (10s; a call with none, or a further one, gets it): a stream that
	// never sends its request is closed then.
	MaxConcurrentStreams int           `yaml:"max_concurrent_streams"`
	CallTimeout          time.Duration `yaml:"call_timeout"`
	// Reflection serves gRPC server reflection (on by default): grpcurl
	// and grpcui find the service and its messages with nothing else
	// installed. It publishes only the Envoy API the listener serves.
	Reflection bool `yaml:"reflection"`
}

// RedisConfig addresses the counter store: one address for a standalone
// server, several for a cluster.
type RedisConfig struct {
	Addrs      []string  `yaml:"addrs"`
	Username   string    `yaml:"username"` // ACL user; empty: default
	Password   string    `yaml:"password"` // AUTH; never logged
	DB         int       `yaml:"db"`
	MasterName string    `yaml:"master_name"` // Sentinel
	TLS        ClientTLS `yaml:"tls"`
	// Timeouts of the checker's client: its calls sit on the request path
	// (near-limit charges, mode sync), so they are short; the aggregator
	// uses aggregator.redis_timeout for reads and writes instead.
	DialTimeout  time.Duration `yaml:"dial_timeout"`  // 500 ms
	ReadTimeout  time.Duration `yaml:"read_timeout"`  // 100 ms
	WriteTimeout time.Duration `yaml:"write_timeout"` // 100 ms
	PoolTimeout  time.Duration `yaml:"pool_timeout"`  // 100 ms: waiting for a free connection
}

// ClientTLS turns a client connection to TLS when Enabled: the server is
// verified against CAFile (empty: the system roots) and ServerName (empty:
// the host dialled); CertFile and KeyFile present a client certificate.
type ClientTLS struct {
	Enabled    bool   `yaml:"enabled"`
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
}

// KafkaConfig addresses the event bus.
type KafkaConfig struct {
	Brokers       []string  `yaml:"brokers"`
	Topic         string    `yaml:"topic"`
	DeferredTopic string    `yaml:"deferred_topic"`
	Compression   string    `yaml:"compression"` // lz4 | zstd | snappy | gzip | none
	TLS           ClientTLS `yaml:"tls"`
	SASL          KafkaSASL `yaml:"sasl"`
}

// KafkaSASL authenticates to the brokers; an empty Mechanism disables it.
type KafkaSASL struct {
	Mechanism string `yaml:"mechanism"` // plain | scram-sha-256 | scram-sha-512
	Username  string `yaml:"username"`
	Password  string `yaml:"password"` // never logged
}

// chIdentifier is what the sink accepts as a database name (it is quoted
// into statements, never bound).
var chIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ClickHouseConfig addresses the analytics store; an empty Addr disables it.
type ClickHouseConfig struct {
	Addr     string    `yaml:"addr"`
	Database string    `yaml:"database"`
	Username string    `yaml:"username"`
	Password string    `yaml:"password"` // never logged
	TLS      ClientTLS `yaml:"tls"`
	// RetentionDays is the usage table's TTL where the server takes one
	// (0: keep everything).
	RetentionDays int `yaml:"retention_days"`
	// FlushInterval: how often the aggregator writes usage rows; MaxRows:
	// rows buffered while ClickHouse is slow or down before the oldest
	// minutes are dropped.
	FlushInterval time.Duration `yaml:"flush_interval"`
	MaxRows       int           `yaml:"max_buffered_rows"`
}

// LimiterConfig bounds the in-process limiter.
type LimiterConfig struct {
	MaxKeys        int           `yaml:"max_keys"`
	IdempotencyTTL time.Duration `yaml:"idempotency_ttl"`
}

// InstanceTTLBeats is how many heartbeats a checker stays listed in the
// registry of live checkers when its instance_ttl is not set.
const InstanceTTLBeats = 3

// DefaultChecker returns the checker settings a process starts from, and
// the library's defaults ([CheckerConfig.WithDefaults]).
func DefaultChecker() CheckerConfig {
	heartbeat := time.Second
	return CheckerConfig{MaxKeys: 1 << 20, MaxBytes: 1 << 30, FlushInterval: 50 * time.Millisecond, MaxEmitInterval: time.Second,
		MaxHeldHits: 256, MaxHeldTotal: 1 << 20, MinRefresh: 50 * time.Millisecond,
		MaxRefresh: 5 * time.Second, PipelineLag: 250 * time.Millisecond, SafetyPercent: 200, NearFloor: 2,
		NearFloorPct: 1, IdleAfter: 2 * time.Minute, ControlPoll: time.Second,
		Heartbeat: heartbeat, InstanceTTL: InstanceTTLBeats * heartbeat, MaxClockSkew: 100 * time.Millisecond,
		SpillMaxBytes: 256 << 20, TopicPartitions: 16,
		StoreTimeout: 150 * time.Millisecond, BreakerFailures: 5, BreakerOpenFor: time.Second}
}

// WithDefaults returns c with its zero fields set to DefaultChecker's,
// as the checker library (checker.Config) takes them: MaxBytes apart,
// whose zero means no bound in bytes (a process bounds its key table to 1
// GiB), and InstanceTTL, which is InstanceTTLBeats of c's heartbeat.
func (c CheckerConfig) WithDefaults() CheckerConfig {
	v, d := reflect.ValueOf(&c).Elem(), reflect.ValueOf(DefaultChecker())
	for i := range v.NumField() {
		switch f := v.Field(i); v.Type().Field(i).Name {
		case "MaxBytes", "InstanceTTL":
		default:
			if f.IsZero() {
				f.Set(d.Field(i))
			}
		}
	}
	if c.InstanceTTL == 0 {
		c.InstanceTTL = InstanceTTLBeats * c.Heartbeat
	}
	return c
}

// DefaultApp returns the defaults every process starts from.
func DefaultApp() App {
	host, _ := os.Hostname()
	if host == "" {
		host = "velvetrope"
	}
	return App{
		InstanceID:  host,
		RulesReload: 5 * time.Second,
		HTTP: HTTPConfig{Addr: ":8080", MaxBodyBytes: 1 << 20, MaxBodyBytesInFlight: 64 << 20, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
			MaxInFlight: 256},
		GRPC: GRPCConfig{Addr: ":8081", MaxConcurrentStreams: 256, CallTimeout: 10 * time.Second, Reflection: true},
		Redis: RedisConfig{DialTimeout: 500 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
			WriteTimeout: 100 * time.Millisecond, PoolTimeout: 100 * time.Millisecond},
		Kafka: KafkaConfig{Topic: "velvetrope.deltas", DeferredTopic: "velvetrope.deferred", Compression: "lz4"},
		ClickHouse: ClickHouseConfig{Database: "velvetrope", Username: "default", RetentionDays: 30,
			FlushInterval: 2 * time.Second, MaxRows: 1_000_000},
		Limiter:   LimiterConfig{MaxKeys: limiter.DefaultMaxKeys, IdempotencyTTL: time.Minute},
		Checker:   DefaultChecker(),
		Analytics: AnalyticsConfig{MaxWindow: 7 * 24 * time.Hour, MaxConcurrent: 8, MemoryMaxBytes: 64 << 20},
		Limits:    DefaultLimits(),
		Aggregator: AggregatorConfig{Group: "velvetrope-aggregator", BatchSize: 1000, BatchWait: 20 * time.Millisecond,
			SessionTimeout: 6 * time.Second, HeartbeatInterval: time.Second, RebalanceTimeout: 6 * time.Second,
			RedisTimeout: 5 * time.Second},
		Deferred: DeferredConfig{Group: "velvetrope-drain", Workers: 16, MaxInFlight: 10000, DeliveryTimeout: 10 * time.Second,
			BackoffMin: 200 * time.Millisecond, BackoffMax: 30 * time.Second, StateRetention: 24 * time.Hour,
			MaxBytes: DefaultDeferredMaxBytes},
	}
}

// envVar is an environment override: the variable, the key path it sets
// (errors about that setting name the variable), and how.
type envVar struct {
	name, key string
	set       func(a *App, v string)
}

// envList splits a comma-separated variable, dropping empty items.
func envList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var envVars = []envVar{
	{"VELVETROPE_INSTANCE_ID", "instance_id", func(a *App, v string) { a.InstanceID = v }},
	{"VELVETROPE_RULES", "rules", func(a *App, v string) { a.Rules = envList(v) }},
	{"VELVETROPE_HTTP_ADDR", "http.addr", func(a *App, v string) { a.HTTP.Addr = v }},
	{"VELVETROPE_GRPC_ADDR", "grpc.addr", func(a *App, v string) { a.GRPC.Addr = v }},
	{"VELVETROPE_REDIS_ADDRS", "redis.addrs", func(a *App, v string) { a.Redis.Addrs = envList(v) }},
	{"VELVETROPE_REDIS_PASSWORD", "redis.password", func(a *App, v string) { a.Redis.Password = v }},
	{"VELVETROPE_KAFKA_BROKERS", "kafka.brokers", func(a *App, v string) { a.Kafka.Brokers = envList(v) }},
	{"VELVETROPE_CLICKHOUSE_ADDR", "clickhouse.addr", func(a *App, v string) { a.ClickHouse.Addr = v }},
	{"VELVETROPE_ADMIN_TOKEN", "admin.token", func(a *App, v string) { a.Admin.Token = v }},
	{"VELVETROPE_HASH_KEY", "checker.hash_key", func(a *App, v string) { a.Checker.HashKey = v }},
	{"VELVETROPE_KAFKA_SASL_PASSWORD", "kafka.sasl.password", func(a *App, v string) { a.Kafka.SASL.Password = v }},
	{"VELVETROPE_CLICKHOUSE_PASSWORD", "clickhouse.password", func(a *App, v string) { a.ClickHouse.Password = v }},
	{"VELVETROPE_ANALYTICS_TOKEN", "analytics.token", func(a *App, v string) { a.Analytics.Token = v }},
	{"VELVETROPE_STATE_DIR", "checker.state_dir", func(a *App, v string) { a.Checker.StateDir = v }},
	{"VELVETROPE_PPROF_ADDR", "debug.pprof_addr", func(a *App, v string) { a.Debug.PprofAddr = v }},
}

// Env lists the environment overrides, applied after the file.
var Env = func() []string {
	names := make([]string, len(envVars))
	for i, e := range envVars {
		names[i] = e.name
	}
	return names
}()

// Override is a value set over the file and the environment, such as a
// command-line flag: Set sets the setting at Key (a key path, http.addr),
// and an error about that setting names From (--http) as its origin.
type Override struct {
	Key, From string
	Set       func(*App)
}

// LoadApp reads the YAML file at path (none when path is ""), applies the
// environment overrides read through getenv (os.LookupEnv in production),
// then overrides, and validates the result. Every problem is reported, as
// an [ErrorList] of [*Error]: each names the setting's key path and where
// its value came from: the file's FILE:LINE:COLUMN, the environment
// variable, or the override's From.
func LoadApp(path string, getenv func(string) (string, bool), overrides ...Override) (App, error) {
	a := DefaultApp()
	o := origins{file: path, env: map[string]string{}, flags: map[string]string{}}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return a, ErrorList{&Error{File: path, Msg: pathErrorMsg(path, err)}}
		}
		keys, errs := decodeAppFile(path, data, &a)
		if len(errs) > 0 {
			return a, errs
		}
		o.keys = keys
	}
	if getenv == nil {
		getenv = os.LookupEnv
	}
	for _, e := range envVars {
		if v, ok := getenv(e.name); ok {
			e.set(&a, v)
			o.env[e.key] = e.name
		}
	}
	for _, ov := range overrides {
		ov.Set(&a)
		o.flags[ov.Key] = ov.From
	}
	var errs ErrorList
	for _, p := range a.problems() {
		e := &Error{Key: p.field, Msg: p.msg}
		o.locate(e, settingKeys(p.field))
		errs = append(errs, e)
	}
	return a, errs.err()
}

// origins records where the loaded settings came from.
type origins struct {
	file  string
	keys  map[string]*yaml.Node // key path → its key in the file
	env   map[string]string     // key path → the variable that set it
	flags map[string]string     // key path → the override that set it
}

// locate sets where e's value came from, the first of keys to have an
// origin: an override or a variable that set the key or a section above
// it (they replace the file's value), else the file's line of the key,
// else, for a setting the file leaves at its default, the file's line of
// the nearest section above it.
func (o origins) locate(e *Error, keys []string) {
	for _, k := range keys {
		for p := k; p != ""; p = parentKey(p) {
			if from, ok := o.flags[p]; ok {
				e.Source = from
				return
			}
			if from, ok := o.env[p]; ok {
				e.Source = from
				return
			}
		}
		if n, ok := o.keys[k]; ok {
			e.File, e.Line, e.Column = o.file, n.Line, n.Column
			return
		}
	}
	for _, k := range keys {
		for p := parentKey(k); p != ""; p = parentKey(p) {
			if n, ok := o.keys[p]; ok {
				e.File, e.Line, e.Column = o.file, n.Line, n.Column
				return
			}
		}
	}
}

// parentKey is the key path above k: "redis" for "redis.addrs",
// "redis.addrs" for "redis.addrs[1]", "" at the top.
func parentKey(k string) string {
	if i := strings.LastIndexAny(k, ".["); i >= 0 {
		return k[:i]
	}
	return ""
}

// settingKeys are the key paths a problem's field names: one
// ("http.addr"), or several siblings written as one
// ("checker.heartbeat/instance_ttl").
func settingKeys(field string) []string {
	parts := strings.Split(field, "/")
	section := parentKey(parts[0])
	keys := []string{parts[0]}
	for _, p := range parts[1:] {
		if section != "" {
			p = section + "." + p
		}
		keys = append(keys, p)
	}
	return keys
}

// problem is one invalid setting: the key path (or sibling paths, see
// settingKeys) and what is wrong.
type problem struct{ field, msg string }

// Validate reports every invalid setting by its key path, as an
// [ErrorList]; [LoadApp] also says where each value came from.
func (a App) Validate() error {
	var errs ErrorList
	for _, p := range a.problems() {
		errs = append(errs, &Error{Key: p.field, Msg: p.msg})
	}
	return errs.err()
}

func (a App) problems() []problem {
	var errs []problem
	bad := func(field, format string, args ...any) {
		errs = append(errs, problem{field, fmt.Sprintf(format, args...)})
	}
	if a.InstanceID == "" || len(a.InstanceID) > 200 || strings.ContainsAny(a.InstanceID, " \t\n/|") {
		bad("instance_id", "must be 1 to 200 bytes without spaces, '/' or '|', got %q", a.InstanceID)
	}
	if p, ok := a.Limits.problem(); ok {
		bad("limits."+p.field, "%s", p.msg)
	}
	if a.RulesReload <= 0 {
		bad("rules_reload", "must be > 0, got %v", a.RulesReload)
	}
	// A bearer token travels in a header: HTTP clients and servers trim
	// the blanks around it and cannot carry control characters, so such
	// a token can never match and would lock the endpoints out in
	// silence. (Tokens are never echoed, not even here.)
	for _, tok := range []struct{ field, v string }{{"admin.token", a.Admin.Token}, {"analytics.token", a.Analytics.Token}} {
		if tok.v == "" {
			continue
		}
		if strings.TrimSpace(tok.v) != tok.v || strings.ContainsFunc(tok.v, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
			bad(tok.field, "must be printable ASCII without spaces (a bearer token in an HTTP header), got %d bytes that are not", len(tok.v))
		}
	}
	checkAddr := func(field, addr string, allowEmpty bool) {
		if addr == "" && allowEmpty {
			return
		}
		if _, port, err := net.SplitHostPort(addr); err != nil {
			bad(field, "want host:port, got %q (%v)", addr, err)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			bad(field, "want host:port with a port from 0 to 65535, got %q", addr)
		}
	}
	checkAddr("http.addr", a.HTTP.Addr, false)
	checkAddr("grpc.addr", a.GRPC.Addr, true)
	checkAddr("debug.pprof_addr", a.Debug.PprofAddr, true)
	for i, r := range a.Redis.Addrs {
		checkAddr(fmt.Sprintf("redis.addrs[%d]", i), r, false)
	}
	for i, b := range a.Kafka.Brokers {
		checkAddr(fmt.Sprintf("kafka.brokers[%d]", i), b, false)
	}
	checkAddr("clickhouse.addr", a.ClickHouse.Addr, true)
	for _, l := range []struct {
		field string
		t     ClientTLS
	}{{"redis.tls", a.Redis.TLS}, {"kafka.tls", a.Kafka.TLS}, {"clickhouse.tls", a.ClickHouse.TLS}} {
		if t := l.t; (t.CertFile == "") != (t.KeyFile == "") {
			bad(l.field, "cert_file and key_file go together")
		} else if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "") {
			bad(l.field, "files or server_name are set but enabled is false")
		}
	}
	switch m := a.Kafka.SASL.Mechanism; m {
	case "", "plain", "scram-sha-256", "scram-sha-512":
		if m != "" && a.Kafka.SASL.Username == "" {
			bad("kafka.sasl.username", "must not be empty with mechanism %s", m)
		}
	default:
		bad("kafka.sasl.mechanism", "want plain, scram-sha-256 or scram-sha-512, got %q", m)
	}
	for _, l := range []struct {
		field string
		t     TLSConfig
	}{{"http.tls", a.HTTP.TLS}, {"grpc.tls", a.GRPC.TLS}} {
		field, t := l.field, l.t
		switch {
		case (t.CertFile == "") != (t.KeyFile == ""):
			bad(field, "cert_file and key_file go together")
		case t.ClientCAFile != "" && t.CertFile == "":
			bad(field, "client_ca_file needs cert_file and key_file")
		}
	}
	if an := a.Analytics; an.MaxWindow < time.Minute || an.MaxWindow > 31*24*time.Hour || an.MaxConcurrent < 1 || an.MaxConcurrent > 256 {
		bad("analytics.max_window/max_concurrent", "want 1m <= max_window <= 744h (31 days) and 1 <= max_concurrent <= 256, got %v and %d",
			an.MaxWindow, an.MaxConcurrent)
	}
	if a.Analytics.MemoryMaxBytes < 1<<20 {
		bad("analytics.memory_max_bytes", "must be at least 1 MiB, got %d", a.Analytics.MemoryMaxBytes)
	}
	if a.HTTP.MaxBodyBytes <= 0 || a.HTTP.MaxBodyBytes > 1<<30 {
		bad("http.max_body_bytes", "must be between 1 and 1 GiB (1073741824), got %d", a.HTTP.MaxBodyBytes)
	} else if a.HTTP.MaxBodyBytesInFlight < a.HTTP.MaxBodyBytes || a.HTTP.MaxBodyBytesInFlight > 1<<40 {
		bad("http.max_body_bytes_in_flight/max_body_bytes", "want max_body_bytes <= max_body_bytes_in_flight <= 1 TiB, got %d and %d", a.HTTP.MaxBodyBytesInFlight, a.HTTP.MaxBodyBytes)
	}
	if a.HTTP.ReadTimeout <= 0 || a.HTTP.WriteTimeout <= 0 {
		bad("http.read_timeout/write_timeout", "must be > 0")
	}
	if a.HTTP.MaxInFlight < 1 || a.HTTP.MaxInFlight > 1_000_000 {
		bad("http.max_in_flight", "must be between 1 and 1000000, got %d", a.HTTP.MaxInFlight)
	}
	if a.GRPC.MaxConcurrentStreams < 1 || a.GRPC.MaxConcurrentStreams > 1_000_000 {
		bad("grpc.max_concurrent_streams", "must be between 1 and 1000000, got %d", a.GRPC.MaxConcurrentStreams)
	}
	if a.GRPC.CallTimeout < time.Millisecond || a.GRPC.CallTimeout > time.Hour {
		bad("grpc.call_timeout", "must be in [1ms, 1h], got %v", a.GRPC.CallTimeout)
	}
	if a.Kafka.Topic == "" {
		bad("kafka.topic", "must not be empty")
	}
	if !chIdentifier.MatchString(a.ClickHouse.Database) {
		bad("clickhouse.database", "want letters, digits and _ (not starting with a digit), got %q", a.ClickHouse.Database)
	}
	if ch := a.ClickHouse; ch.RetentionDays < 0 || ch.FlushInterval <= 0 || ch.FlushInterval > time.Minute || ch.MaxRows < 1000 {
		bad("clickhouse.retention_days/flush_interval/max_buffered_rows",
			"want retention_days >= 0, 0 < flush_interval <= 1m, max_buffered_rows >= 1000; got %d, %v, %d",
			ch.RetentionDays, ch.FlushInterval, ch.MaxRows)
	}
	if a.Limiter.MaxKeys < 64 {
		bad("limiter.max_keys", "must be at least 64, got %d", a.Limiter.MaxKeys)
	}
	if a.Limiter.IdempotencyTTL < 0 {
		bad("limiter.idempotency_ttl", "must not be negative")
	}
	switch a.Kafka.Compression {
	case "lz4", "zstd", "snappy", "gzip", "none":
	default:
		bad("kafka.compression", "want lz4, zstd, snappy, gzip or none, got %q", a.Kafka.Compression)
	}
	ck := a.Checker
	switch {
	case ck.MaxKeys < 256:
		bad("checker.max_keys", "must be at least 256, got %d", ck.MaxKeys)
	case ck.MaxBytes < 0 || (ck.MaxBytes > 0 && ck.MaxBytes < 256*1024):
		bad("checker.max_bytes", "must be 0 (no bound in bytes) or at least 256KiB, got %d", ck.MaxBytes)
	case ck.FlushInterval <= 0 || ck.FlushInterval > time.Minute:
		bad("checker.flush_interval", "must be in (0, 1m], got %v", ck.FlushInterval)
	case ck.MaxEmitInterval < ck.FlushInterval || ck.MaxEmitInterval > time.Minute:
		bad("checker.max_emit_interval/flush_interval", "want flush_interval <= max_emit_interval <= 1m, got %v and %v", ck.MaxEmitInterval, ck.FlushInterval)
	case ck.MaxHeldHits < 1 || ck.MaxHeldTotal < ck.MaxHeldHits:
		bad("checker.max_held_hits/max_held_hits_total", "want 1 <= max_held_hits <= max_held_hits_total, got %d and %d", ck.MaxHeldHits, ck.MaxHeldTotal)
	case ck.Heartbeat <= 0 || ck.InstanceTTL < ck.Heartbeat:
		bad("checker.heartbeat/instance_ttl", "want 0 < heartbeat <= instance_ttl, got %v and %v", ck.Heartbeat, ck.InstanceTTL)
	case ck.MaxClockSkew <= 0:
		bad("checker.max_clock_skew", "must be > 0, got %v", ck.MaxClockSkew)
	case ck.MinRefresh <= 0 || ck.MaxRefresh < ck.MinRefresh:
		bad("checker.min_refresh/max_refresh", "want 0 < min_refresh <= max_refresh, got %v and %v", ck.MinRefresh, ck.MaxRefresh)
	case ck.PipelineLag < 0:
		bad("checker.pipeline_lag", "must not be negative")
	case ck.FlushInterval > ck.PipelineLag:
		bad("checker.flush_interval/pipeline_lag", "want flush_interval <= pipeline_lag (the lag includes the flush), got %v and %v", ck.FlushInterval, ck.PipelineLag)
	case ck.SafetyPercent < 100:
		bad("checker.safety_percent", "must be at least 100, got %d", ck.SafetyPercent)
	case ck.NearFloor < 1 || ck.NearFloorPct < 0 || ck.NearFloorPct > 100:
		bad("checker.near_floor/near_floor_percent", "want near_floor >= 1 and 0 <= near_floor_percent <= 100")
	case ck.IdleAfter <= 0:
		bad("checker.idle_after", "must be > 0")
	case ck.ControlPoll < 10*time.Millisecond || ck.ControlPoll > time.Hour:
		bad("checker.control_poll", "must be in [10ms, 1h], got %v", ck.ControlPoll)
	case ck.SpillMaxBytes < 1<<20:
		bad("checker.spill_max_bytes", "must be at least 1 MiB, got %d", ck.SpillMaxBytes)
	case ck.TopicPartitions < 1:
		bad("checker.topic_partitions", "must be >= 1")
	case ck.StoreTimeout < time.Millisecond || ck.StoreTimeout > 10*time.Second:
		bad("checker.store_timeout", "must be in [1ms, 10s], got %v", ck.StoreTimeout)
	case ck.BreakerFailures < 1 || ck.BreakerOpenFor < 10*time.Millisecond:
		bad("checker.breaker_failures/breaker_open_for", "want breaker_failures >= 1 and breaker_open_for >= 10ms, got %d and %v",
			ck.BreakerFailures, ck.BreakerOpenFor)
	}
	if r := a.Redis; r.DialTimeout <= 0 || r.ReadTimeout <= 0 || r.WriteTimeout <= 0 || r.PoolTimeout <= 0 {
		bad("redis.dial_timeout/read_timeout/write_timeout/pool_timeout", "must all be > 0")
	}
	ag := a.Aggregator
	switch {
	case ag.Group == "":
		bad("aggregator.group", "must not be empty")
	case ag.BatchSize < 1 || ag.BatchSize > 100_000:
		bad("aggregator.batch_size", "must be between 1 and 100000, got %d", ag.BatchSize)
	case ag.BatchWait <= 0:
		bad("aggregator.batch_wait", "must be > 0")
	case ag.HeartbeatInterval <= 0 || ag.SessionTimeout < 3*ag.HeartbeatInterval:
		bad("aggregator.session_timeout/heartbeat_interval", "want heartbeat_interval > 0 and session_timeout >= 3 × heartbeat_interval, got %v and %v",
			ag.HeartbeatInterval, ag.SessionTimeout)
	case ag.RebalanceTimeout <= 0:
		bad("aggregator.rebalance_timeout", "must be > 0")
	case ag.RedisTimeout <= 0:
		bad("aggregator.redis_timeout", "must be > 0")
	}
	df := a.Deferred
	switch {
	case df.Group == "":
		bad("deferred.group", "must not be empty")
	case df.Workers < 1 || df.Workers > 4096:
		bad("deferred.workers", "must be between 1 and 4096, got %d", df.Workers)
	case df.MaxInFlight < 1 || df.MaxInFlight > 1_000_000:
		bad("deferred.max_in_flight", "must be between 1 and 1000000, got %d", df.MaxInFlight)
	case df.DeliveryTimeout < time.Millisecond:
		bad("deferred.delivery_timeout", "must be >= 1ms, got %v", df.DeliveryTimeout)
	case df.BackoffMin < time.Millisecond || df.BackoffMax < df.BackoffMin:
		bad("deferred.backoff_min/backoff_max", "want backoff_min >= 1ms and backoff_max >= backoff_min, got %v and %v", df.BackoffMin, df.BackoffMax)
	case df.StateRetention < time.Minute:
		bad("deferred.state_retention", "must be >= 1m, got %v", df.StateRetention)
	case df.MaxBytes < 1<<20 || df.MaxBytes > 1<<40:
		bad("deferred.max_bytes", "must be between 1 MiB and 1 TiB (%d to %d), got %d", 1<<20, int64(1)<<40, df.MaxBytes)
	}
	if a.Kafka.DeferredTopic == "" {
		bad("kafka.deferred_topic", "must not be empty")
	}
	return errs
}

// ResolveStateDir returns the directory for files that must survive a
// restart (see CheckerConfig.StateDir), creating it (0700) if needed. A
// directory anyone may write to (such as /tmp) is refused: another user
// could plant or swap the files in it.
func ResolveStateDir(configured string, getenv func(string) (string, bool)) (string, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	var candidates []string
	switch {
	case configured != "":
		candidates = []string{configured}
	default:
		if v, ok := getenv("STATE_DIRECTORY"); ok && v != "" {
			candidates = append(candidates, strings.Split(v, ":")[0])
		}
		candidates = append(candidates, "/var/lib/velvetrope")
		if v, ok := getenv("XDG_STATE_HOME"); ok && v != "" {
			candidates = append(candidates, filepath.Join(v, "velvetrope"))
		} else if home, err := os.UserHomeDir(); err == nil {
			candidates = append(candidates, filepath.Join(home, ".local", "state", "velvetrope"))
		}
	}
	var errs []string
	for _, dir := range candidates {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		info, err := os.Stat(dir)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if !info.IsDir() {
			errs = append(errs, dir+": not a directory")
			continue
		}
		if info.Mode().Perm()&0o002 != 0 {
			errs = append(errs, dir+": writable by every user; give velvetrope a directory of its own")
			continue
		}
		probe, err := os.CreateTemp(dir, ".probe-*")
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		probe.Close()
		os.Remove(probe.Name())
		return dir, nil
	}
	return "", fmt.Errorf("checker.state_dir: no usable state directory (%s)", strings.Join(errs, "; "))
}
