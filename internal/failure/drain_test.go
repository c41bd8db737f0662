package failure

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// TestDrainKilledMidway: a checker defers 120 requests of one key (10/s),
// a drain delivers part of them and is killed with SIGKILL; a new drain
// takes over from the committed offsets. Every ticket reaches the target;
// a repeat only ever carries a ticket's own idempotency key, already
// seen; no aligned second gets more than the limit, repeats included.
func TestDrainKilledMidway(t *testing.T) {
	// the services' own rule: skipped without their addresses (TestMain
	// then builds no binary), failed when they are set and do not answer
	redisAddr, kafkaAddr := testsvc.Redis(t), testsvc.Kafka(t)
	target := &testsvc.Target{}
	ts := httptest.NewServer(target)
	defer ts.Close()
	dir := t.TempDir()
	rulesPath, cfgPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "app.yaml")
	rules := fmt.Sprintf(`domain: shop
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 10}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %q, max_age: 5m}
`, ts.URL)
	cfg := fmt.Sprintf("kafka: {topic: %s, deferred_topic: %s}\naggregator: {group: %s}\ndeferred: {group: %s}\nchecker: {topic_partitions: 4}\n",
		testsvc.Unique("deltas"), testsvc.Unique("dfr"), testsvc.Unique("g"), testsvc.Unique("drain"))
	for path, text := range map[string]string{rulesPath: rules, cfgPath: cfg} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"VELVETROPE_REDIS_ADDRS=" + redisAddr, "VELVETROPE_KAFKA_BROKERS=" + kafkaAddr, "VELVETROPE_GRPC_ADDR="}
	newProc := func(name, kind string) *proc {
		return &proc{name: name, kind: kind, addr: freeAddr(t), args: []string{"--config", cfgPath, "--rules", rulesPath},
			env: append(append([]string(nil), env...), "VELVETROPE_INSTANCE_ID="+testsvc.Unique(name),
				"VELVETROPE_STATE_DIR="+filepath.Join(dir, name)),
			log: filepath.Join(dir, name+".log")}
	}
	agg, chk, d1, d2 := newProc("agg", "aggregator"), newProc("chk", "checker"), newProc("drain1", "drain"), newProc("drain2", "drain")
	agg.args = []string{"--config", cfgPath} // an aggregator reads no rules: it refuses --rules
	procs := []*proc{agg, chk, d1, d2}
	t.Cleanup(func() {
		for _, p := range procs {
			p.signal(t, syscall.SIGTERM)
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s log (tail):\n%s", p.name, p.tail())
			}
		}
	})
	for _, p := range procs[:3] {
		p.start(t)
	}
	for _, p := range procs[:3] {
		p.waitReady(t, 60*time.Second)
	}
	start := time.Now()
	var tickets []string
	hc := &http.Client{Timeout: 5 * time.Second}
	for i := range 130 {
		body := fmt.Sprintf(`{"domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"u1"}]}],"payload":{"path":"/o/%d"}}`, i)
		resp, err := hc.Post("http://"+chk.addr+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Decision, Ticket string }
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || out.Decision == "deny" {
			t.Fatalf("request %d: %+v %v", i, out, err)
		}
		if out.Decision == "defer" {
			tickets = append(tickets, out.Ticket)
		}
	}
	if len(tickets) < 80 {
		t.Fatalf("only %d of 130 deferred", len(tickets))
	}
	// kill the drain once it has delivered some
	waitUntil(t, 60*time.Second, func() bool { return target.Distinct() >= 30 })
	d1.signal(t, syscall.SIGKILL)
	killed := target.Distinct()
	d2.start(t)
	d2.waitReady(t, 60*time.Second)
	waitUntil(t, 120*time.Second, func() bool { return target.Distinct() >= len(tickets) })
	time.Sleep(2 * time.Second) // integration test: let late repeats arrive before counting
	dl, err := target.Check(tickets, 10)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Delivered != len(tickets) {
		t.Fatalf("%d of %d tickets delivered", dl.Delivered, len(tickets))
	}
	if code, body := chk.get("/v1/deferred/" + tickets[len(tickets)-1]); code != 200 || !strings.Contains(body, `"state":"delivered"`) {
		t.Fatalf("last ticket: %d %s", code, body)
	}
	t.Logf("%d deferred; %d delivered when the drain was killed; all %d delivered after %v with %d repeats",
		len(tickets), killed, dl.Delivered, dl.Last.Sub(start).Round(time.Millisecond), dl.Repeats)
}

func waitUntil(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", d)
		}
		time.Sleep(50 * time.Millisecond) // integration test: real processes
	}
}
