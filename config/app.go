package config

import (
	"os"
	"time"

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
	// RulesStore is the rules database: domains whose rules live in a
	// store, versioned, beside (never instead of) the rule files.
	RulesStore RulesStoreConfig `yaml:"rules_store"`
	// XDS takes rules from an xDS control plane too.
	XDS XDSConfig `yaml:"xds"`

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

// DefaultApp returns the defaults every process starts from.
func DefaultApp() App {
	host, _ := os.Hostname()
	if host == "" {
		host = "velvetrope"
	}
	return App{
		InstanceID:  host,
		RulesReload: 5 * time.Second,
		RulesStore:  RulesStoreConfig{History: 100, Poll: time.Second, MaxAge: 5 * time.Minute, MaxDocumentBytes: 4 << 20},
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
