package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/internal/httpapi"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// TestDeferredThroughTheProcesses: the checker, the aggregator and a
// drain on the real Redis and Kafka. 150 quick requests for one key of a
// 10/s defer rule: about 10 allowed, the rest deferred with tickets; the
// drain releases them at the limit (no aligned second gets more than 10)
// and the target receives each ticket exactly once; the whole set takes
// at least deferred / 10 seconds; every ticket reads delivered. Midway
// the drain is stopped and another started: nothing is lost, and a
// repeat only ever carries an already-seen key.
func TestDeferredThroughTheProcesses(t *testing.T) {
	target := &testsvc.Target{}
	ts := httptest.NewServer(target)
	defer ts.Close()
	dir := t.TempDir()
	rules := fmt.Sprintf(`domain: shop
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 10}
    algorithm: fixed_window
    on_exceed: defer
    defer: {target: %q, max_age: 2m, max_attempts: 5}
`, ts.URL)
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	app := realApp(t)
	app.Rules = []string{dir}
	app.Kafka.DeferredTopic = testsvc.Unique("dfr")
	// the deferred counts reach ClickHouse through the aggregator
	app.ClickHouse.Addr, app.ClickHouse.Database = testsvc.ClickHouse(t), testsvc.Unique("dfr")
	app.ClickHouse.FlushInterval = 200 * time.Millisecond
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var aggSrv *httpapi.Server
	aggApp := fxtest.New(t, aggregatorModule(app, quiet), fx.Populate(&aggSrv))
	aggApp.RequireStart()
	defer aggApp.RequireStop()
	var chk *httpapi.Server
	chkApp := fxtest.New(t, checkerModule(app, quiet), fx.Populate(&chk))
	chkApp.RequireStart()
	defer chkApp.RequireStop()
	startDrainApp := func(n int) (*fxtest.App, *httpapi.Server) {
		a := app
		a.InstanceID = fmt.Sprintf("%s-%d", app.InstanceID, n)
		var srv *httpapi.Server
		d := fxtest.New(t, drainModule(a, quiet), fx.Populate(&srv))
		d.RequireStart()
		return d, srv
	}
	drain1, d1 := startDrainApp(1)
	// the drain is ready once it is a member of its group
	waitReady(t, "http://"+d1.Addr()+"/readyz")

	start := time.Now()
	var tickets []string
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	errs := make(chan error, 150)
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 150; i += 10 {
				body := fmt.Sprintf(`{"domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"u1"}]}],"payload":{"path":"/orders/%d","body":"{}"}}`, i)
				resp, err := http.Post("http://"+chk.Addr()+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				var out httpjson.CheckResponse
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				mu.Lock()
				switch {
				case err != nil:
					errs <- err
				case out.Decision == "allow":
					allowed++
				case out.Decision == "defer":
					tickets = append(tickets, out.Ticket)
				default:
					errs <- fmt.Errorf("request %d: %+v", i, out)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// live requests and releases share the budget: at most 10 a second
	sent := time.Since(start)
	if allowed < 10 || allowed > 10*(int(sent/time.Second)+2) || len(tickets)+allowed != 150 {
		t.Fatalf("allowed %d, deferred %d in %v", allowed, len(tickets), sent)
	}
	// stop the first drain midway, start another
	waitFor(t, 20*time.Second, func() bool {
		k, _ := target.Arrivals()
		if len(k) < 30 && time.Since(start) > 15*time.Second {
			r, _ := http.Get("http://" + d1.Addr() + "/metrics")
			b, _ := io.ReadAll(r.Body)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "velvetrope_drain") {
					t.Log(l)
				}
			}
		}
		return len(k) >= 30
	})
	drain1.RequireStop()
	drain2, _ := startDrainApp(2)
	defer drain2.RequireStop()
	waitFor(t, 90*time.Second, func() bool {
		k, _ := target.Arrivals()
		seen := map[string]bool{}
		for _, x := range k {
			seen[x] = true
		}
		return len(seen) >= len(tickets)
	})
	dl, err := target.Check(tickets, 10)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Delivered != len(tickets) {
		t.Fatalf("%d of %d tickets delivered", dl.Delivered, len(tickets))
	}
	if took, least := dl.Last.Sub(start), time.Duration(len(tickets)/10-1)*time.Second; took < least {
		t.Fatalf("%d deferred at 10/s took %v, want at least %v", len(tickets), took, least)
	}
	for _, tk := range []string{tickets[0], tickets[len(tickets)-1]} {
		resp, err := http.Get("http://" + chk.Addr() + "/v1/deferred/" + tk)
		if err != nil {
			t.Fatal(err)
		}
		var st httpjson.Ticket
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if st.State != "delivered" || st.DeliveredAt == nil || st.Attempts < 1 {
			t.Fatalf("ticket %s: %+v", tk, st)
		}
	}
	// top-denied lists the key with every deferral, and every release
	// among its admissions; a release's "not yet" is no refusal
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Get("http://" + chk.Addr() + "/v1/analytics/top-denied?window=1h&limit=10&domain=shop")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		last = string(b)
		var top struct {
			Keys []struct {
				Descriptor                string
				Denied, Allowed, Deferred int
			}
		}
		if json.Unmarshal(b, &top) == nil && len(top.Keys) == 1 && top.Keys[0].Descriptor == "user_id=u1" &&
			top.Keys[0].Deferred == len(tickets) && top.Keys[0].Allowed == allowed && top.Keys[0].Denied == 0 {
			// (each deferred request is one decision: its releases are none)
			break
		}
		if time.Now().After(deadline) {
			r, _ := http.Get("http://" + aggSrv.Addr() + "/metrics")
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "velvetrope_sink") || strings.HasPrefix(l, "velvetrope_aggregator") {
					t.Log(l) // what the aggregator did with the usage
				}
			}
			t.Fatalf("top-denied: %s; want user_id=u1 with %d deferred, %d allowed (the drain's releases are no decisions), 0 denied", last, len(tickets), allowed)
		}
		time.Sleep(100 * time.Millisecond) // the real pipeline: checker → Kafka → aggregator → ClickHouse
	}
	t.Logf("sent in %v: allowed %d, deferred %d, delivered %d tickets in %v (%d repeats across the drain restart); per second %v",
		sent.Round(time.Millisecond), allowed, len(tickets), dl.Delivered, dl.Last.Sub(start).Round(time.Millisecond), dl.Repeats, dl.PerSecond)
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", d)
		}
		time.Sleep(50 * time.Millisecond) // integration test: the real drain works in real time
	}
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		r, err := http.Get(url)
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
}

// TestDevDrainsDeferred: `velvetrope dev` queues a deferred request on its
// in-memory bus and its drain delivers it once the key has budget; the
// ticket then reads delivered, and the drain's metrics count it.
func TestDevDrainsDeferred(t *testing.T) {
	target := &testsvc.Target{}
	ts := httptest.NewServer(target)
	defer ts.Close()
	dir := t.TempDir()
	rules := fmt.Sprintf("domain: shop\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: second, requests_per_unit: 1}\n"+
		"    algorithm: fixed_window\n    on_exceed: defer\n    defer: {target: %q}\n", ts.URL)
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	app := config.DefaultApp()
	app.HTTP.Addr, app.GRPC.Addr = "127.0.0.1:0", ""
	app.Rules = []string{dir}
	var srv *httpapi.Server
	fxApp := fxtest.New(t, devModule(app, slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&srv))
	fxApp.RequireStart()
	defer fxApp.RequireStop()
	var ticket string
	for i := range 2 {
		resp, err := http.Post("http://"+srv.Addr()+"/v1/check", "application/json",
			strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"user_id","value":"a"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		var out httpjson.CheckResponse
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if i == 1 {
			if out.Decision != "defer" {
				t.Fatalf("second request: %+v", out)
			}
			ticket = out.Ticket
		}
	}
	waitFor(t, 10*time.Second, func() bool { k, _ := target.Arrivals(); return len(k) == 1 && k[0] == ticket })
	waitFor(t, 5*time.Second, func() bool {
		r, err := http.Get("http://" + srv.Addr() + "/v1/deferred/" + ticket)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return strings.Contains(string(b), `"state":"delivered"`)
	})
	metricValue(t, "http://"+srv.Addr()+"/metrics", "velvetrope_drain_deliveries_total", func(x float64) bool { return x == 1 })
	metricValue(t, "http://"+srv.Addr()+"/metrics", `velvetrope_decisions_total{decision="defer",domain="shop",mode="async",override="false",rule="shop:user_id"}`,
		func(x float64) bool { return x == 1 })
}
