package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestDevStagedRollout: in a real dev, a version staged in shadow
// refuses nobody, while the analytics show what it would have refused
// under the staged domain; promote makes it refuse.
func TestDevStagedRollout(t *testing.T) {
	d := startDev(t, "", env("VELVETROPE_ADMIN_TOKEN=tok"))
	send := func(method, path, body string, headers ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+d.HTTP+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	doc := func(n string) string {
		return "domain: stg\ndescriptors:\n  - key: user\n    algorithm: fixed_window\n    rate_limit: {unit: hour, requests_per_unit: " + n + "}\n"
	}
	if code, body := send("PUT", "/v1/rules/stg", doc("100")); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := send("PUT", "/v1/rules/stg?stage=shadow", doc("2"), "If-Match", `"1"`); code != 200 || !strings.Contains(body, `"stage":"shadow"`) {
		t.Fatalf("stage: %d %s", code, body)
	}
	decisions := func(n int) string {
		var out []string
		for range n {
			_, body := send("POST", "/v1/check", `{"domain":"stg","descriptors":[{"entries":[{"key":"user","value":"priya"}]}]}`)
			var dec struct{ Decision string }
			_ = json.Unmarshal([]byte(body), &dec)
			out = append(out, dec.Decision)
		}
		return strings.Join(out, " ")
	}
	if got := decisions(5); got != "allow allow allow allow allow" {
		t.Fatalf("under the staged version: %s", got)
	}
	q := url.Values{"window": {"1h"}, "domain": {"stg#staged"}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, body := send("GET", "/v1/analytics/top-denied?"+q.Encode(), "")
		if strings.Contains(body, `"rule":"stg#staged:user","descriptor":"user=priya","denied":3,"allowed":2`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the staged rule's would-be refusals are not in the analytics after 60 s: %s", body)
		}
		time.Sleep(200 * time.Millisecond) // waiting for the real process's analytics
	}
	if code, body := send("POST", "/v1/rules/stg/promote", ""); code != 200 {
		t.Fatalf("promote: %d %s", code, body)
	}
	// promoted: the staged limit (2) is the live one, the live window's 5 already spent
	if got := decisions(1); got != "deny" {
		t.Fatalf("after promote: %s", got)
	}
}
