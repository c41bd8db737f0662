package config

import (
	"regexp"
	"time"
)

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
	// them (they answer 403) unless Tokens names some. Its holder is
	// recorded as "admin". Never logged.
	Token string `yaml:"token"`
	// Tokens are named tokens, each as good as Token: a change is
	// recorded under the name of the token that made it (the rules
	// store's history and audit).
	Tokens []NamedToken `yaml:"tokens"`
}

// NamedToken is an admin token and the name its changes are recorded
// under.
type NamedToken struct {
	Name  string `yaml:"name"`
	Token string `yaml:"token"`
}

// AdminTokenName is the name admin.token's changes are recorded under.
const AdminTokenName = "admin"

// Named returns every admin token with its name (admin.token as
// AdminTokenName first).
func (c AdminConfig) Named() []NamedToken {
	var out []NamedToken
	if c.Token != "" {
		out = append(out, NamedToken{AdminTokenName, c.Token})
	}
	return append(out, c.Tokens...)
}

// RulesStoreConfig is the rules database (package rulestore) a checker
// follows and the admin API writes.
type RulesStoreConfig struct {
	// Backend is "" (no store: rule files only), "redis" or "memory"
	// (this process alone; what dev uses unless told otherwise).
	Backend string `yaml:"backend"`
	// RedisAddrs is a Redis of its own for the rules (one address:
	// standalone, several: cluster); empty: redis.addrs. The rules must
	// survive what counters may lose: run it with noeviction and AOF.
	RedisAddrs []string `yaml:"redis_addrs"`
	// History is how many versions of each domain are kept.
	History int `yaml:"history"`
	// Poll is how often a checker reads the store's versions, the fallback
	// of its change feed.
	Poll time.Duration `yaml:"poll"`
	// MaxAge is how old the rules may be (the last full read of the store)
	// before /readyz says not ready; 0: no bound.
	MaxAge time.Duration `yaml:"max_age"`
	// MaxDocumentBytes bounds one domain's document.
	MaxDocumentBytes int `yaml:"max_document_bytes"`
}

// XDSConfig takes rules from an xDS control plane as Envoy's ratelimit
// service does, under its settings' names (CONFIG_TYPE=GRPC_XDS_SOTW and
// CONFIG_GRPC_XDS_*): Envoy Gateway's controller serves the rate limit
// service it deploys that way.
type XDSConfig struct {
	// ConfigType is FILE (rule files and the rules store only; the
	// default) or GRPC_XDS_SOTW (and the control plane's configurations).
	ConfigType string `yaml:"config_type"`
	// ServerURL is the control plane's host:port; NodeID names this
	// process to it.
	ServerURL string `yaml:"server_url"`
	NodeID    string `yaml:"node_id"`
	// TLS secures the stream (CONFIG_GRPC_XDS_SERVER_USE_TLS and the
	// CONFIG_GRPC_XDS_*_TLS_* files).
	TLS ClientTLS `yaml:"tls"`

	badUseTLS string // CONFIG_GRPC_XDS_SERVER_USE_TLS when it is no bool
}

// XDSOn reports whether the process follows a control plane.
func (x XDSConfig) XDSOn() bool { return x.ConfigType == "GRPC_XDS_SOTW" }

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
