package failure

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/httpjson"
)

const leaseRule = `  - key: job_tenant
    concurrency: {max_in_flight: 4, lease_ttl: 3s}
`

// envLeaseHolder makes this test binary the client that holds leases
// (holdLeases, from TestMain) instead of running the suite.
const envLeaseHolder = "VELVETROPE_TEST_LEASE_HOLDER"

// checkLease asks addr for a job_tenant=acme admission: its decision and
// lease.
func checkLease(addr string) (decision, lease string, err error) {
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"job_tenant","value":"acme"}]}]}`
	c := http.Client{Timeout: 5 * time.Second}
	r, err := c.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return "", "", err
	}
	defer r.Body.Close()
	var out httpjson.CheckResponse
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil || len(out.Statuses) != 1 {
		return "", "", fmt.Errorf("answer %d: %v", r.StatusCode, err)
	}
	return out.Decision, out.Statuses[0].Lease, nil
}

// holdLeases is the client process of TestLeasesOfAKilledClient: it
// takes every place of job_tenant=acme on the checker at addr, says so,
// and holds them until it is killed.
func holdLeases(addr string) {
	held := 0
	for held < 4 {
		d, lease, err := checkLease(addr)
		if err != nil || d != "allow" || lease == "" {
			fmt.Printf("failed %s %q %v\n", d, lease, err)
			os.Exit(1)
		}
		held++
	}
	fmt.Printf("held %d\n", held)
	select {} // until kill -9
}

// TestLeasesOfAKilledClient: a client process takes the 4 places of a
// concurrency rule (lease_ttl 3 s) on one checker and is killed with
// SIGKILL, releasing nothing. The other checker refuses the tenant (the
// leases are counted in the store: exact across checkers) and counts 4 in
// flight, until the leases expire: then it admits again. Nothing leaks
// beyond the TTL.
func TestLeasesOfAKilledClient(t *testing.T) {
	r := newRig(t, rigOptions{extraRules: leaseRule})
	a, b := r.checkers[0], r.checkers[1]
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), envLeaseHolder+"="+a.addr)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	acquired := time.Now()
	if err != nil || line != "held 4\n" {
		_ = holder.Process.Kill()
		t.Fatalf("the client says %q (%v): %s", line, err, stderr.String())
	}
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	killed := time.Now()

	if d, lease, err := checkLease(b.addr); err != nil || d != "deny" || lease != "" {
		t.Fatalf("the other checker with 4 of 4 in flight: %s %q %v", d, lease, err)
	}
	code, body := b.get("/v1/leases")
	var leases httpjson.Leases
	if err := json.Unmarshal([]byte(body), &leases); code != 200 || err != nil {
		t.Fatalf("GET /v1/leases: %d %s", code, body)
	}
	if len(leases.Rules) != 1 || leases.Rules[0].Rule != "api:job_tenant" || leases.Rules[0].InFlight != 4 {
		t.Fatalf("in flight after the kill: %s", body)
	}
	if m := b.metric(`velvetrope_leases_in_flight{rule="api:job_tenant"}`); m != 4 {
		t.Fatalf("velvetrope_leases_in_flight: %v, want 4", m)
	}
	// the leases expire 3 s after they were taken: poll every 100 ms
	var admitted time.Time
	for deadline := acquired.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		d, lease, err := checkLease(b.addr)
		if err != nil {
			t.Fatal(err)
		}
		if d == "allow" {
			if lease == "" {
				t.Fatal("admitted without a lease")
			}
			admitted = time.Now()
			break
		}
	}
	switch {
	case admitted.IsZero():
		t.Fatal("the killed client's leases never expired")
	case admitted.Sub(acquired) < 3*time.Second:
		t.Fatalf("admitted %v after the leases were taken: before their TTL", admitted.Sub(acquired))
	}
	t.Logf("killed %v after acquiring; admitted again %v after acquiring (lease_ttl 3s)",
		killed.Sub(acquired).Round(time.Millisecond), admitted.Sub(acquired).Round(time.Millisecond))
	if _, body := b.get("/v1/leases"); !strings.Contains(body, `"in_flight":1`) {
		t.Fatalf("in flight after the expiry and one admission: %s", body)
	}
}
