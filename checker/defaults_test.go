package checker

import (
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
)

// TestDefaultsAreTheProcesss: a library user's zero Config runs with the
// settings a process starts from (config.DefaultChecker), field by field,
// and an instance TTL follows a heartbeat set alone.
func TestDefaultsAreTheProcesss(t *testing.T) {
	var c Config
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	app := config.DefaultChecker()
	cases := []struct {
		name      string
		got, want any
	}{
		{"MaxKeys", c.MaxKeys, app.MaxKeys},
		{"MaxBytes (no bound)", c.MaxBytes, int64(0)},
		{"LocalMaxKeys", c.LocalMaxKeys, limiter.DefaultMaxKeys},
		{"FlushInterval", c.FlushInterval, app.FlushInterval},
		{"MaxEmitInterval", c.MaxEmitInterval, app.MaxEmitInterval},
		{"MaxHeldHits", c.MaxHeldHits, app.MaxHeldHits},
		{"MaxHeldTotal", c.MaxHeldTotal, app.MaxHeldTotal},
		{"MinRefresh", c.MinRefresh, app.MinRefresh},
		{"MaxRefresh", c.MaxRefresh, app.MaxRefresh},
		{"PipelineLag", c.PipelineLag, app.PipelineLag},
		{"SafetyPercent", c.SafetyPercent, app.SafetyPercent},
		{"NearFloor", c.NearFloor, app.NearFloor},
		{"NearFloorPct", c.NearFloorPct, app.NearFloorPct},
		{"IdleAfter", c.IdleAfter, app.IdleAfter},
		{"ControlPoll", c.ControlPoll, app.ControlPoll},
		{"Heartbeat", c.Heartbeat, app.Heartbeat},
		{"InstanceTTL", c.InstanceTTL, app.InstanceTTL},
		{"MaxClockSkew", c.MaxClockSkew, app.MaxClockSkew},
		{"StoreTimeout", c.StoreTimeout, app.StoreTimeout},
		{"BreakerFailures", c.BreakerFailures, app.BreakerFailures},
		{"BreakerOpenFor", c.BreakerOpenFor, app.BreakerOpenFor},
	}
	for _, k := range cases {
		if k.got != k.want {
			t.Errorf("%s: got %v, want %v", k.name, k.got, k.want)
		}
	}
	c = Config{CheckerConfig: config.CheckerConfig{Heartbeat: 2 * time.Second}}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if want := config.InstanceTTLBeats * 2 * time.Second; c.InstanceTTL != want {
		t.Errorf("InstanceTTL with a heartbeat of 2s: got %v, want %v", c.InstanceTTL, want)
	}
}
