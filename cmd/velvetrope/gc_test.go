package main

import (
	"bytes"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

// TestTuneGC: the checker's collector defaults apply where the
// environment is silent, and only there; max_bytes 0 keeps Go's.
func TestTuneGC(t *testing.T) {
	percent := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	defer func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) }()
	cases := []struct {
		name     string
		maxBytes int64
		env      map[string]string
		percent  int
		limit    int64
		logged   string
	}{
		{"defaults", 1 << 30, nil, gcPercent, 2<<30 + 256<<20, "GOGC=400 GOMEMLIMIT=2415919104"},
		{"GOGC set", 1 << 20, map[string]string{"GOGC": "50"}, 100, 2<<20 + 256<<20, `GOGC="from the environment"`},
		{"GOMEMLIMIT set", 1 << 30, map[string]string{"GOMEMLIMIT": "1GiB"}, gcPercent, -1, `GOMEMLIMIT="from the environment"`},
		{"both set", 1 << 30, map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}, 100, -1, ""},
		{"no bound", 0, nil, 100, -1, ""},
	}
	for _, c := range cases {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(1<<63 - 1)
		var out bytes.Buffer
		tuneGC(c.maxBytes, func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }, slog.New(slog.NewTextHandler(&out, nil)))
		gotPercent := debug.SetGCPercent(100)
		gotLimit := debug.SetMemoryLimit(-1)
		wantLimit := c.limit
		if wantLimit < 0 {
			wantLimit = 1<<63 - 1 // left as it was
		}
		if gotPercent != c.percent || gotLimit != wantLimit {
			t.Errorf("%s: GOGC %d, limit %d; want %d and %d", c.name, gotPercent, gotLimit, c.percent, wantLimit)
		}
		if c.logged == "" && out.Len() > 0 || c.logged != "" && !strings.Contains(out.String(), c.logged) {
			t.Errorf("%s: logged %q, want %q", c.name, out.String(), c.logged)
		}
	}
}
