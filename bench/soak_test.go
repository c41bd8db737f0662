package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// TestSoak runs one checker process and one aggregator process (the real
// binary, on real Redis and Kafka) at a fixed request rate over 1,000,000
// keys for VELVETROPE_SOAK (a duration, e.g. 10m; unset: skipped, so it
// never runs in CI) and samples the checker every 30 s: resident memory,
// Go heap, goroutines and the p99 latency of the calls in the sample. It
// fails if memory or goroutines grow past the plateau: after the key table
// reaches its steady state (keys idle for checker.idle_after are dropped),
// the last sample may not exceed the one at a third of the run by 25 %.
//
//	make services-up; source .services.env
//	VELVETROPE_SOAK=10m go test -run TestSoak -v -timeout 30m ./bench
//
// The load generator shares the machine's cores with the processes,
// Redis and Kafka.
func TestSoak(t *testing.T) {
	durText := os.Getenv("VELVETROPE_SOAK")
	if durText == "" {
		t.Skip("set VELVETROPE_SOAK=10m to run the soak")
	}
	dur, err := time.ParseDuration(durText)
	if err != nil {
		t.Fatalf("VELVETROPE_SOAK: %v", err)
	}
	rate := 2000
	if v := os.Getenv("VELVETROPE_SOAK_RATE"); v != "" {
		if rate, err = strconv.Atoi(v); err != nil {
			t.Fatalf("VELVETROPE_SOAK_RATE: %v", err)
		}
	}
	const keys = 1_000_000
	dir := t.TempDir()
	bin := filepath.Join(dir, "velvetrope")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/velvetrope/velvetrope/cmd/velvetrope").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	pr := testsvc.StartPrivateRedis(t)
	rules := filepath.Join(dir, "rules.yaml")
	cfg := filepath.Join(dir, "app.yaml")
	os.WriteFile(rules, []byte("domain: soak\ndescriptors:\n  - key: user_id\n    algorithm: fixed_window\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n"), 0o600)
	os.WriteFile(cfg, []byte(fmt.Sprintf("kafka: {topic: %s}\naggregator: {group: %s}\n", testsvc.Unique("soak"), testsvc.Unique("g"))), 0o600)
	free := func() string {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().String()
	}
	httpAddr, grpcAddr, aggAddr := free(), free(), free()
	env := append(os.Environ(), "VELVETROPE_REDIS_ADDRS="+pr.Addr, "VELVETROPE_KAFKA_BROKERS="+testsvc.Kafka(t),
		"VELVETROPE_STATE_DIR="+dir)
	start := func(args ...string) *exec.Cmd {
		log, _ := os.Create(filepath.Join(dir, args[0]+".log"))
		cmd := exec.Command(bin, append(args, "--config", cfg)...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait(); log.Close() })
		return cmd
	}
	start("aggregator", "--http", aggAddr)
	start("checker", "--http", httpAddr, "--grpc", grpcAddr, "--rules", rules)
	get := func(path string) string {
		r, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			return ""
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(get("/readyz"), `"ready"`); {
		if time.Now().After(deadline) {
			t.Fatal("checker not ready")
		}
		time.Sleep(200 * time.Millisecond)
	}
	metric := func(body, name string) float64 {
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return -1
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	var mu sync.Mutex
	var lat []time.Duration
	var failed int
	tokens := make(chan int, rate)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for n := range tokens {
				req := &rlsv3.RateLimitRequest{Domain: "soak", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
					{Key: "user_id", Value: "u" + strconv.Itoa(n*7919%keys)}}}}}
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := client.ShouldRateLimit(ctx, req)
				cancel()
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, time.Since(t0))
				}
				mu.Unlock()
			}
		})
	}
	go func() { // open loop: a fixed rate whatever the latency
		defer close(tokens)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		per := rate / 100
		for n := 0; ; {
			select {
			case <-stop:
				return
			case <-tick.C:
				for range per {
					select {
					case tokens <- n:
						n++
					default: // the workers are saturated: the request is dropped, counted below
						mu.Lock()
						failed++
						mu.Unlock()
					}
				}
			}
		}
	}()

	type sample struct {
		at                    time.Duration
		rss, heap, goroutines float64
		keys                  float64
		calls                 int
		p99                   time.Duration
		failed                int
	}
	var samples []sample
	begin := time.Now()
	every := 30 * time.Second
	for time.Since(begin) < dur {
		time.Sleep(min(every, dur-time.Since(begin))) // the soak's clock: real time passes by design
		mu.Lock()
		l, f := lat, failed
		lat, failed = nil, 0
		mu.Unlock()
		slices.Sort(l)
		var p99 time.Duration
		if len(l) > 0 {
			p99 = l[len(l)*99/100]
		}
		body := get("/metrics")
		s := sample{at: time.Since(begin).Round(time.Second), rss: metric(body, "velvetrope_process_resident_bytes"),
			heap: metric(body, "velvetrope_process_heap_bytes"), goroutines: metric(body, "velvetrope_process_goroutines"),
			keys: metric(body, "velvetrope_checker_keys"), calls: len(l), p99: p99, failed: f}
		samples = append(samples, s)
		t.Logf("%6v  rss %6.1f MiB  heap %6.1f MiB  goroutines %4.0f  keys %8.0f  calls %6d  p99 %v  failed %d",
			s.at, s.rss/(1<<20), s.heap/(1<<20), s.goroutines, s.keys, s.calls, s.p99.Round(10*time.Microsecond), s.failed)
	}
	close(stop)
	wg.Wait()
	if len(samples) < 3 {
		t.Fatalf("too short to judge growth: %d samples", len(samples))
	}
	plateau, last := samples[len(samples)/3], samples[len(samples)-1]
	t.Logf("rate %d/s over %d keys for %v: at %v rss %.1f MiB, goroutines %.0f, p99 %v; at the end rss %.1f MiB, goroutines %.0f, p99 %v",
		rate, keys, dur, plateau.at, plateau.rss/(1<<20), plateau.goroutines, plateau.p99, last.rss/(1<<20), last.goroutines, last.p99)
	if last.rss > 1.25*plateau.rss || last.goroutines > 1.25*plateau.goroutines+10 {
		t.Fatalf("growth after the plateau: rss %.1f → %.1f MiB, goroutines %.0f → %.0f",
			plateau.rss/(1<<20), last.rss/(1<<20), plateau.goroutines, last.goroutines)
	}
}
