package checker

import (
	"github.com/velvetrope/velvetrope/config"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/rates"
)

// TestBandWidth: the checker sizes its near band from its config
// (docs/design.md): threshold = max(near_floor, limit × near_floor_percent
// / 100, rate × (min_refresh + pipeline_lag) × safety_percent / 100) —
// defaults 2, 1 %, (50 ms + 250 ms) × 200 % — which rates.TestBandWidth
// pins for each kind of learned rate.
func TestBandWidth(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want rates.Band
	}{
		{Config{}, rates.Band{Floor: 2, FloorPercent: 1, Cover: 600 * time.Millisecond}},
		{Config{
			CheckerConfig: config.CheckerConfig{NearFloor: 5, NearFloorPct: 3, MinRefresh: 100 * time.Millisecond, PipelineLag: 100 * time.Millisecond, SafetyPercent: 150},
		}, rates.Band{Floor: 5, FloorPercent: 3, Cover: 300 * time.Millisecond}},
	} {
		if got := newRig(t, c.cfg).c.band; got != c.want {
			t.Fatalf("config %+v: band %+v, want %+v", c.cfg, got, c.want)
		}
	}
}
