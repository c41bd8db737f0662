package logx

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimited(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Second)
	now := time.Unix(1_700_000_000, 0)
	l.now = func() time.Time { return now }
	steps := []struct {
		advance time.Duration
		logged  bool
	}{{0, true}, {0, false}, {500 * time.Millisecond, false}, {499 * time.Millisecond, false}, {time.Millisecond, true}, {0, false}, {time.Hour, true}}
	for i, s := range steps {
		now = now.Add(s.advance)
		if got := l.Warn("decision failed", "error", "boom"); got != s.logged {
			t.Fatalf("step %d: logged %v, want %v", i, got, s.logged)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || strings.Contains(lines[0], "suppressed") ||
		!strings.Contains(lines[1], "suppressed_since_last=3") || !strings.Contains(lines[2], "suppressed_since_last=1") {
		t.Fatalf("log:\n%s", buf.String())
	}
}
