// Package failure is the failure suite: two checker processes and an
// aggregator process (the real binary) under load against real Redis,
// Kafka and ClickHouse, one fault at a time. Each test injects a fault,
// recovers, and checks that decisions followed each rule's failure policy,
// that the Redis counts equal what was admitted (nothing lost, nothing
// counted twice), and that the metrics showed the fault.
package failure

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// bin is the velvetrope binary the suite runs, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	if addr := os.Getenv(envLeaseHolder); addr != "" {
		holdLeases(addr) // a client process of the suite: never returns
	}
	if os.Getenv(testsvc.EnvRedis) == "" {
		os.Exit(m.Run()) // the tests skip without services; nothing to build
	}
	os.Exit(testsvc.RunWithBinary(m, &bin))
}

// The rules under test: an async rule that fails open and a sync rule that
// fails closed, both far above the load so every refusal is the failure
// policy's.
const rules = `domain: api
descriptors:
  - key: user_id
    algorithm: fixed_window
    failure: open
    rate_limit: {unit: hour, requests_per_unit: 100000000}
  - key: tenant
    algorithm: fixed_window
    mode: sync
    failure: closed
    rate_limit: {unit: hour, requests_per_unit: 100000000}
`

const limit = 100000000

// proc is one velvetrope process.
type proc struct {
	name, kind, addr string
	grpc             string // its gRPC address, when it has one
	args, env        []string
	log              string
	cmd              *exec.Cmd
	done             chan struct{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{p.kind, "--http", p.addr}, p.args...)...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
}

// signal sends sig and waits for the process to end.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop on %v within 40 s", p.name, sig)
	}
	p.cmd = nil
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// get fetches path from the process.
func (p *proc) get(path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// metric reads one sample (the full series text, e.g. a name with labels)
// from the process's /metrics; -1 when absent.
func (p *proc) metric(series string) float64 {
	_, body := p.get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// histogramMax reads a histogram from /metrics and returns the upper
// bound of the highest bucket holding a sample (0 with no samples).
func (p *proc) histogramMax(name string) time.Duration {
	_, body := p.get("/metrics")
	type bucket struct {
		le    float64
		count float64
	}
	var buckets []bucket
	var total float64
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+`_bucket{le="`); ok {
			le, v, _ := strings.Cut(rest, `"} `)
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if le == "+Inf" {
				total = n
				continue
			}
			f, _ := strconv.ParseFloat(le, 64)
			buckets = append(buckets, bucket{f, n})
		}
	}
	for _, b := range buckets {
		if total > 0 && b.count >= total {
			return time.Duration(b.le * float64(time.Second))
		}
	}
	if len(buckets) > 0 && total > 0 {
		return time.Duration(buckets[len(buckets)-1].le * float64(time.Second))
	}
	return 0
}

// waitReady polls /readyz until 200.
func (p *proc) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, body := p.get("/readyz")
		if code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v: %d %s\nlog:\n%s", p.name, within, code, body, p.tail())
		}
		time.Sleep(100 * time.Millisecond) // waiting for a real process
	}
}

// rig is two checkers and an aggregator over one Redis, one Kafka topic
// and one ClickHouse database.
type rig struct {
	dir      string
	redis    *testsvc.PrivateRedis
	kafka    string
	ch       string
	db       string
	checkers []*proc
	agg      *proc
	rc       *redis.Client
	store    *counters.Redis
	start    time.Time
}

type rigOptions struct {
	kafka, clickhouse string // "" = the shared ones
	extraRules        string // descriptors appended to the rules
	checkerConfig     string // YAML flow entries added to the checkers' `checker:` block
	extraConfig       string // whole YAML lines added to every process's configuration
	checkers          int    // 0: two
	grpc              bool   // the checkers listen on gRPC too (proc.grpc)
}

// runRoom is how long a test of the suite may read its counters after the
// rig starts (its load, its faults and converge's 60 s).
const runRoom = 150 * time.Second

// awayFromTheHour waits past the next hour when it is less than runRoom
// away: the sync rule's window counter expires a second after its hour
// ends (as it should), so a run that crossed the hour would find the
// tenants' earlier hits gone before converge reads them.
func awayFromTheHour(t *testing.T, now time.Time) {
	t.Helper()
	if left := time.Until(now.Truncate(time.Hour).Add(time.Hour)); left < runRoom {
		t.Logf("waiting %v for the hour to turn: the run would cross it", left.Round(time.Second))
		time.Sleep(left + time.Second) // real time: the counters' expiry is Redis's
	}
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	awayFromTheHour(t, time.Now())
	r := &rig{dir: t.TempDir(), redis: testsvc.StartPrivateRedis(t), kafka: o.kafka, ch: o.clickhouse,
		db: testsvc.Unique("fail"), start: time.Now()}
	if r.kafka == "" {
		r.kafka = testsvc.Kafka(t)
	}
	if r.ch == "" {
		r.ch = testsvc.ClickHouse(t)
	}
	rulesPath := filepath.Join(r.dir, "rules.yaml")
	cfgPath := filepath.Join(r.dir, "app.yaml")
	cfg := fmt.Sprintf(`kafka: {topic: %s}
aggregator: {group: %s}
clickhouse: {database: %s, flush_interval: 500ms}
checker: {topic_partitions: 4%s}
%s`, testsvc.Unique("deltas"), testsvc.Unique("g"), r.db, o.checkerConfig, o.extraConfig)
	for path, text := range map[string]string{rulesPath: rules + o.extraRules, cfgPath: cfg} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"VELVETROPE_REDIS_ADDRS=" + r.redis.Addr, "VELVETROPE_KAFKA_BROKERS=" + r.kafka,
		"VELVETROPE_CLICKHOUSE_ADDR=" + r.ch, "VELVETROPE_GRPC_ADDR="}
	newProc := func(name, kind string) *proc {
		return &proc{name: name, kind: kind, addr: freeAddr(t), args: []string{"--config", cfgPath},
			env: append(append([]string(nil), env...), "VELVETROPE_INSTANCE_ID="+name,
				"VELVETROPE_STATE_DIR="+filepath.Join(r.dir, name)),
			log: filepath.Join(r.dir, name+".log")}
	}
	r.agg = newProc("agg", "aggregator")
	r.agg.start(t)
	n := o.checkers
	if n == 0 {
		n = 2
	}
	for i := range n {
		c := newProc(fmt.Sprintf("c%d", i), "checker")
		c.args = append(c.args, "--rules", rulesPath)
		if o.grpc {
			c.grpc = freeAddr(t)
			c.env = append(c.env, "VELVETROPE_GRPC_ADDR="+c.grpc) // the last of a variable wins
		}
		c.start(t)
		r.checkers = append(r.checkers, c)
	}
	t.Cleanup(func() {
		for _, p := range append([]*proc{r.agg}, r.checkers...) {
			p.signal(t, syscall.SIGTERM)
		}
		if t.Failed() {
			for _, p := range append([]*proc{r.agg}, r.checkers...) {
				t.Logf("%s log (tail):\n%s", p.name, p.tail())
			}
		}
	})
	for _, p := range append([]*proc{r.agg}, r.checkers...) {
		p.waitReady(t, 60*time.Second)
	}
	r.rc = redis.NewClient(&redis.Options{Addr: r.redis.Addr})
	t.Cleanup(func() { r.rc.Close() })
	r.store = counters.NewRedis(r.rc, "vr", 0)
	return r
}

// outcome is one answered request.
type outcome struct {
	checker  int
	key      string // "user_id=u3" or "tenant=t1"
	admitted bool
	at       time.Time
}

// load drives requests round-robin over the checkers that are up, from a
// few workers with a pause between requests (bounded: it stops when told).
type load struct {
	mu       sync.Mutex
	outcomes []outcome
	errors   atomic.Int64
	up       []atomic.Bool
	stop     chan struct{}
	wg       sync.WaitGroup
}

const workers = 6

func (r *rig) startLoad(t *testing.T) *load {
	t.Helper()
	l := &load{up: make([]atomic.Bool, len(r.checkers)), stop: make(chan struct{})}
	for i := range l.up {
		l.up[i].Store(true)
	}
	for w := range workers {
		l.wg.Go(func() {
			hc := &http.Client{Timeout: 2 * time.Second}
			for n := w; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				ci := n % len(r.checkers)
				if !l.up[ci].Load() {
					ci = (ci + 1) % len(r.checkers)
					if !l.up[ci].Load() {
						time.Sleep(5 * time.Millisecond)
						continue
					}
				}
				key := fmt.Sprintf("user_id=u%d", n%50)
				if n%3 == 0 {
					key = fmt.Sprintf("tenant=t%d", n%5)
				}
				k, v, _ := strings.Cut(key, "=")
				body := `{"domain":"api","descriptors":[{"entries":[{"key":"` + k + `","value":"` + v + `"}]}],"hits":1}`
				resp, err := hc.Post("http://"+r.checkers[ci].addr+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					l.errors.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					l.errors.Add(1)
					continue
				}
				l.mu.Lock()
				l.outcomes = append(l.outcomes, outcome{ci, key, bytes.HasPrefix(b, []byte(`{"decision":"allow"`)), time.Now()})
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond) // paces the load generator
			}
		})
	}
	return l
}

// halt stops the load and waits for the workers.
func (l *load) halt() {
	close(l.stop)
	l.wg.Wait()
}

// drain stops sending to checker i and waits until no request to it is
// in flight, as a load balancer does before it stops a replica.
func (l *load) drain(i int) {
	l.up[i].Store(false)
	time.Sleep(2*time.Second + 100*time.Millisecond) // longer than the client timeout
}

// tally counts answers matching f: admitted per key, and all answered.
func (l *load) tally(f func(outcome) bool) (admitted map[string]int64, answered, allowed int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	admitted = map[string]int64{}
	for _, o := range l.outcomes {
		if !f(o) {
			continue
		}
		answered++
		if o.admitted {
			allowed++
			admitted[o.key]++
		}
	}
	return admitted, answered, allowed
}

func all(outcome) bool { return true }

// between selects answers of kind ("user_id" or "tenant") answered within
// [from, to].
func between(kind string, from, to time.Time) func(outcome) bool {
	return func(o outcome) bool {
		return strings.HasPrefix(o.key, kind+"=") && !o.at.Before(from) && !o.at.After(to)
	}
}

// windows are the hour windows the run may have touched.
func (r *rig) windows() []int64 {
	h := int64(time.Hour)
	first, last := r.start.UnixNano()/h*h, time.Now().UnixNano()/h*h
	out := []int64{first}
	if last != first {
		out = append(out, last)
	}
	return out
}

// counted reads what Redis holds for key over the run's windows: the
// sync counter for tenants, the async window counter of any other key.
func (r *rig) counted(t *testing.T, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var sum int64
	for _, w := range r.windows() {
		if strings.HasPrefix(key, "tenant=") {
			q := counters.SyncRequest{Key: "api:tenant|" + key, Algorithm: "fixed_window", Limit: limit,
				Window: int64(time.Hour), Cost: 0, Now: w + 1}
			res, err := r.store.ChargeSync(ctx, &q)
			if err != nil {
				t.Fatal(err)
			}
			sum += limit - res.Remaining
			continue
		}
		kind, _, _ := strings.Cut(key, "=")
		items := []counters.ReadItem{{Key: "api:" + kind + "|" + key, Kind: counters.KindWindow, Window: w}}
		if err := r.store.Read(ctx, "failure-suite/0", items); err != nil {
			t.Fatal(err)
		}
		sum += items[0].Total
	}
	return sum
}

// converge waits until Redis holds what was admitted, key by key (the
// pipeline is asynchronous: deltas arrive within its lag, or after a
// fault once the spill or the backlog is replayed), and fails with the
// differences if it does not within 60 s. Nothing may be missing. slack
// is how many hits may be counted beyond the answers in all: a store call
// whose answer was lost when the store failed (applied by Redis, seen as
// a timeout by the checker, which then applied the failure policy) is
// counted though the checker refused it or counted it again; at most one
// per call in flight when the store failed. A charge that timed out on a
// loaded machine without any fault injected is the same case, so every
// failed charge the checkers report adds one to slack.
func (r *rig) converge(t *testing.T, admitted map[string]int64, slack int64) {
	t.Helper()
	slack += int64(r.checkerMetric(`velvetrope_checker_store_errors_total{op="charge"}`))
	deadline := time.Now().Add(60 * time.Second)
	check := func() (missing []string, extra int64) {
		for k, want := range admitted {
			got := r.counted(t, k)
			if got < want {
				missing = append(missing, fmt.Sprintf("%s: redis %d, admitted %d", k, got, want))
			}
			extra += max(got-want, 0)
		}
		return missing, extra
	}
	for {
		missing, _ := check()
		if len(missing) == 0 {
			time.Sleep(time.Second) // settled: nothing more arrives afterwards either
			missing, extra := check()
			if len(missing) != 0 || extra > slack {
				t.Fatalf("after settling: missing %v, %d counted beyond the answers (slack %d)", missing, extra, slack)
			}
			if extra > 0 {
				t.Logf("%d hits counted beyond the answers (calls in flight when the store failed; slack %d)", extra, slack)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis counts did not reach the admitted hits within 60 s:\n%s", strings.Join(missing, "\n"))
		}
		time.Sleep(200 * time.Millisecond) // waiting for the real pipeline
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
