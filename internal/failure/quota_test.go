package failure

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/bench/rlqsclient"
	"github.com/velvetrope/velvetrope/httpjson"
)

const quotaRules = `  - key: rlqs_tenant
    rlqs: {bucket_keys: [rlqs_tenant]}
    algorithm: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: late_tenant
    algorithm: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 60}
`

func post(t *testing.T, addr, path, body string) httpjson.CheckResponse {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	r, err := c.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var out httpjson.CheckResponse
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil || r.StatusCode != 200 {
		t.Fatalf("POST %s: %d %v", path, r.StatusCode, err)
	}
	return out
}

// TestQuotaProtocolsAcrossCheckers, on the real Kafka, Redis and
// ClickHouse with two checker processes: four RLQS proxies, two on each
// checker, asking 240 of a bucket's 100 an hour admit 90 to 100 between
// them, and their reports are the bucket's analytics; a late charge on
// one checker is refused on the other once its delta reaches the store.
func TestQuotaProtocolsAcrossCheckers(t *testing.T) {
	r := newRig(t, rigOptions{extraRules: quotaRules, grpc: true})
	grpcAddrs := []string{r.checkers[0].grpc, r.checkers[1].grpc}
	bucket := map[string]string{"rlqs_tenant": "acme"}
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for i := range 4 {
		c, err := rlqsclient.Dial(grpcAddrs[i%2], rlqsclient.Options{Domain: "api", Interval: 100 * time.Millisecond, DenyWithoutAssignment: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for range 60 {
				if c.Allow(bucket) {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
				time.Sleep(time.Duration(10*(i+1)) * time.Millisecond) // uneven demand: the proxies' own pace
			}
			if err := c.Err(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	t.Logf("4 RLQS proxies over 2 checkers admitted %d of a bucket's 100 (240 asked)", admitted)
	if admitted > 100 || admitted < 90 {
		t.Fatalf("admitted %d of 100", admitted)
	}
	// the reports are the bucket's analytics: as many allowed as admitted
	var allowed, denied uint64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, body := r.checkers[0].get("/v1/analytics/usage?domain=api&key=rlqs_tenant%3Dacme&window=1h")
		var u httpjson.Usage
		allowed, denied = 0, 0
		if json.Unmarshal([]byte(body), &u) == nil {
			for _, m := range u.Minutes {
				allowed, denied = allowed+m.Allowed, denied+m.Denied
			}
		}
		if allowed == uint64(admitted) && denied == uint64(240-admitted) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the analytics show %d allowed and %d denied, the proxies %d and %d", allowed, denied, admitted, 240-admitted)
		}
	}

	// a late charge on one checker, refused on the other
	a, b := r.checkers[0].addr, r.checkers[1].addr
	desc := `"descriptors":[{"entries":[{"key":"late_tenant","value":"acme"}]}]`
	if d := post(t, b, "/v1/check", `{"domain":"api",`+desc+`}`); d.Decision != "allow" {
		t.Fatalf("before the charge: %s", d.Decision)
	}
	if d := post(t, a, "/v1/charge", `{"domain":"api",`+desc+`,"hits":200}`); d.Decision != "allow" || d.Statuses[0].Remaining != 0 {
		t.Fatalf("the charge: %+v", d)
	}
	waitUntil(t, 30*time.Second, func() bool {
		return post(t, b, "/v1/check", `{"domain":"api",`+desc+`,"hits":0}`).Decision == "deny"
	})
}
