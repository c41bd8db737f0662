package config

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeRule(t *testing.T, path string, limit string) {
	t.Helper()
	src := "domain: api\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: minute, requests_per_unit: " + limit + "}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatcherReloadsAndKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	writeRule(t, file, "10")
	rs, err := LoadRules(dir)
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(rs)
	w, err := NewWatcher(store, time.Second, dir)
	if err != nil {
		t.Fatal(err)
	}
	var reloads int
	var lastErr error
	w.OnReload = func(*RuleSet) { reloads++ }
	w.OnError = func(err error) { lastErr = err }
	limit := func() int64 { return store.Load().Match("api", entries("user_id", "x")).Limit }

	steps := []struct {
		name      string
		change    func()
		reloaded  bool
		wantLimit int64
		wantErr   string
	}{
		{"unchanged", func() {}, false, 10, ""},
		{"new limit", func() { writeRule(t, file, "20") }, true, 20, ""},
		{"invalid file keeps the last good set", func() { writeRule(t, file, "-5") }, false, 20, "api.yaml:4:"},
		{"fixed again", func() { writeRule(t, file, "30") }, true, 30, ""},
		{"new file with a second domain", func() {
			os.WriteFile(filepath.Join(dir, "login.yaml"), []byte("domain: login\ndescriptors: []\n"), 0o644)
		}, true, 30, ""},
		{"file removed", func() { os.Remove(filepath.Join(dir, "login.yaml")) }, true, 30, ""},
	}
	for i, s := range steps {
		lastErr = nil
		s.change()
		got, err := w.Check()
		if got != s.reloaded {
			t.Fatalf("step %d (%s): reloaded = %v, want %v (err %v)", i, s.name, got, s.reloaded, err)
		}
		if s.wantErr == "" && err != nil || s.wantErr != "" && (err == nil || lastErr == nil || !strings.Contains(err.Error(), s.wantErr)) {
			t.Fatalf("step %d (%s): err = %v, want %q", i, s.name, err, s.wantErr)
		}
		if l := limit(); l != s.wantLimit {
			t.Fatalf("step %d (%s): live limit %d, want %d", i, s.name, l, s.wantLimit)
		}
	}
	if reloads != 4 {
		t.Fatalf("OnReload called %d times, want 4", reloads)
	}
	if store.Load().HasDomain("login") {
		t.Fatal("removed domain still live")
	}
}

func TestWatcherStartStop(t *testing.T) {
	dir := t.TempDir()
	writeRule(t, filepath.Join(dir, "api.yaml"), "1")
	rs, _ := LoadRules(dir)
	w, err := NewWatcher(NewStore(rs), time.Hour, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := NewWatcher(NewStore(rs), 0, dir); err == nil {
		t.Fatal("zero interval accepted")
	}
}
