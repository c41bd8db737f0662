package config

import (
	"reflect"
	"time"
)

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
	// FirstTouchPercent: a percent of a window rule's ceiling (1; negative:
	// none) that every live checker may admit of a window it has no store
	// answer for from memory, at most MaxHeldHits; every near-limit charge
	// reserves it for the others (docs/design.md, "First touch from memory").
	// Every checker of a fleet needs the same value.
	FirstTouchPercent int64 `yaml:"first_touch_percent"`
	// HashKey keys the hash of hash_values entries; every checker that
	// shares counters needs the same secret (empty: a random key per
	// process). Never logged.
	HashKey string `yaml:"hash_key"`
}

// InstanceTTLBeats is how many heartbeats a checker stays listed in the
// registry of live checkers when its instance_ttl is not set.
const InstanceTTLBeats = 3

// DefaultChecker returns the checker settings a process starts from, and
// the library's defaults ([CheckerConfig.WithDefaults]).
func DefaultChecker() CheckerConfig {
	heartbeat := time.Second
	return CheckerConfig{MaxKeys: 1 << 20, MaxBytes: 1 << 30, FlushInterval: 50 * time.Millisecond, MaxEmitInterval: time.Second,
		MaxHeldHits: 256, MaxHeldTotal: 1 << 20, FirstTouchPercent: 1, MinRefresh: 50 * time.Millisecond,
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
