package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/bench/loadgen"
)

func sample() report {
	res := func(rps float64, p99 time.Duration) loadgen.Result {
		return loadgen.Result{PerSecond: rps, P99: p99, Requests: uint64(rps * 8)}
	}
	return report{Started: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Commit: "abc", Machine: "2 cores", Callers: 64,
		Duration: 8 * time.Second, Warmup: 2 * time.Second, Rows: []row{
			{System: "ceiling", Conns: 4, Keys: 1000, Result: res(20000, 9*time.Millisecond)},
			{System: "envoy", Conns: 4, Keys: 1000, Result: res(8000, 20*time.Millisecond), RedisPerDecision: 2,
				ServiceCPUPer1000: 60, RedisCPUPer1000: 40, SystemCPUPer1000: 100, MemPerKey: 90},
			{System: "velvetrope-async", Conns: 4, Keys: 1000, Result: res(18000, 10*time.Millisecond), DeltasPerDecision: 0.04,
				RecordsPerDecision: 0.002},
		}}
}

func TestMarkdownSection(t *testing.T) {
	r := sample()
	md := r.markdown("c.png")
	for _, want := range []string{"| ceiling (no-op server) | 20,000 (9.0 ms) |", "| envoy ratelimit (Redis per call) | 8,000 (20.0 ms) = 40 % |",
		"| velvetrope checker, async | 18,000 (10.0 ms) = 90 % |", "| velvetrope checker, async | 4 | 1,000 | 0.00 | 0.0 | 0.040 | 0.0020 |",
		"| envoy ratelimit (Redis per call) | 4 | 1,000 | 100.0 | 60.0 | 40.0 | 0.0 | 90 B |", "![", "c.png"} {
		if !strings.Contains(md, want) {
			t.Fatalf("missing %q in:\n%s", want, md)
		}
	}
}

// TestWriteMarkdownReplacesOnlyItsSection: the text around the marks
// survives a rewrite; a file with one mark is refused.
func TestWriteMarkdownReplacesOnlyItsSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.md")
	os.WriteFile(p, []byte("# Benchmarks\n\nbefore\n"), 0o644)
	r := sample()
	if err := writeMarkdown(p, r, "c.png"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, append(must(os.ReadFile(p)), []byte("\nafter\n")...), 0o644)
	r.Rows[0].Result.PerSecond = 30000
	if err := writeMarkdown(p, r, "c.png"); err != nil {
		t.Fatal(err)
	}
	s := string(must(os.ReadFile(p)))
	if strings.Count(s, beginMark) != 1 || !strings.Contains(s, "before") || !strings.Contains(s, "after") || !strings.Contains(s, "30,000") || strings.Contains(s, "20,000 (9.0") {
		t.Fatalf("rewritten file:\n%s", s)
	}
	os.WriteFile(p, []byte(beginMark+"\n"), 0o644)
	if err := writeMarkdown(p, r, "c.png"); err == nil {
		t.Fatal("a file with one mark was rewritten")
	}
}

func TestChartAndHelpers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.png")
	if err := writeChart(p, sample()); err != nil {
		t.Fatal(err)
	}
	if b := must(os.ReadFile(p)); len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("not a PNG (%d bytes)", len(b))
	}
	for v, want := range map[float64]float64{0: 1, 7: 10, 18000: 20000, 46449: 50000, 100: 100} {
		if got := niceCeil(v); got != want {
			t.Fatalf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
	if thousands(1000000) != "1,000,000" || thousands(12) != "12" {
		t.Fatal("thousands")
	}
	if _, err := ints("1,x"); err == nil {
		t.Fatal("ints accepted x")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestOvershootSection(t *testing.T) {
	r := overReport{Started: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Commit: "abc", Runs: 3, Steady: []int64{990, 1000},
		Cases: []overCase{{Name: "async", Limit: 1000, Conns: 1, Runs: []int64{1050, 1010, 1100}, Median: 1050},
			{Name: "async", Limit: 10000, Conns: 24, Runs: []int64{9700, 9600, 9900}, Median: 9700},
			{Name: "gubernator", Limit: 1000, Conns: 1, Runs: []int64{2600, 2700, 2800}, Median: 2700}}}
	md := r.markdown()
	for _, want := range []string{
		"| velvetrope `near_limit: async`, 1 connection per server | median 1,050 (+5.0 %), +1.0 % to +10.0 % [1,050, 1,010, 1,100]; 0 store calls | — |",
		"| velvetrope `near_limit: async`, a connection per caller | — | median 9,700 (-3.0 %)",
		"| gubernator GLOBAL (3 nodes), 1 connection per server | median 2,700 (+170.0 %)", "990 and 1,000"} {
		if !strings.Contains(md, want) {
			t.Fatalf("missing %q in:\n%s", want, md)
		}
	}
	p := filepath.Join(t.TempDir(), "b.md")
	os.WriteFile(p, []byte("# B\n"), 0o644)
	if err := writeOvershoot(p, r); err != nil {
		t.Fatal(err)
	}
	if err := writeOvershoot(p, r); err != nil {
		t.Fatal(err)
	}
	if s := string(must(os.ReadFile(p))); strings.Count(s, overBegin) != 1 || !strings.HasPrefix(s, "# B") {
		t.Fatalf("rewritten:\n%s", s)
	}
}

func TestRLQSSection(t *testing.T) {
	r := rlqsReport{Started: time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC), Commit: "abc",
		Cases: []rlqsCase{{Limit: 1000, Runs: []int64{1022, 1010}, Asked: []int64{1965, 1990}, Median: 1022, Clients: 6},
			{Limit: 10000, Runs: []int64{10182}, Asked: []int64{19704}, Median: 10182, Clients: 6}}}
	md := r.markdown()
	for _, want := range []string{"| velvetrope RLQS, 6 clients over 3 checkers | median 1,022 (+2.2 %), +1.0 % to +2.2 % [1,022 of 1,965 asked; 1,010 of 1,990 asked] |",
		"median 10,182 (+1.8 %)", "between 0.9 × L and 1.05 × L"} {
		if !strings.Contains(md, want) {
			t.Fatalf("missing %q in:\n%s", want, md)
		}
	}
	p := filepath.Join(t.TempDir(), "b.md")
	os.WriteFile(p, []byte("# B\n"), 0o644)
	for range 2 {
		if err := writeRLQS(p, r); err != nil {
			t.Fatal(err)
		}
	}
	if s := string(must(os.ReadFile(p))); strings.Count(s, rlqsBegin) != 1 || !strings.HasPrefix(s, "# B") {
		t.Fatalf("written twice:\n%s", s)
	}
}
