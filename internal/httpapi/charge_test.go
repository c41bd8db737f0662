package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/local"
)

// newChargeHandlers are /v1/check and /v1/charge over one engine.
func newChargeHandlers(t testing.TB) (check, charge http.Handler) {
	t.Helper()
	rs, err := config.ExampleRules()
	if err != nil {
		t.Fatal(err)
	}
	k, _ := limiter.NewKeyed()
	l, err := local.New(config.NewStore(rs), k, fixedClock(t0), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return CheckHandler(l, 4096, nil, nil), ChargeHandler(l, 4096, nil)
}

func postTo(h http.Handler, path, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec
}

// TestChargeContract: a charge past the limit is answered allow with
// nothing remaining, and the next check is refused; a charge may name
// its check's request id instead of the descriptors; a retried charge is
// counted once.
func TestChargeContract(t *testing.T) {
	check, charge := newChargeHandlers(t)
	user := `"descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}]`
	if rec := postTo(check, "/v1/check", `{"domain":"api",`+user+`,"request_id":"r1"}`); rec.Code != 200 {
		t.Fatalf("check: %d %s", rec.Code, rec.Body)
	}
	for range 2 {
		rec := postTo(charge, "/v1/charge", `{"domain":"api","hits":60,"request_id":"r1"}`)
		if rec.Code != 200 {
			t.Fatalf("charge by id: %d %s", rec.Code, rec.Body)
		}
		var got httpjson.CheckResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Decision != "allow" || len(got.Statuses) != 1 || got.Statuses[0].Remaining != 39 || got.Statuses[0].Rule != "api:user_id" {
			t.Fatalf("charge answered %+v", got)
		}
	}
	rec := postTo(charge, "/v1/charge", `{"domain":"api",`+user+`,"hits":100}`)
	var got httpjson.CheckResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got.Decision != "allow" || got.Statuses[0].Remaining != 0 || rec.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("a charge past the limit answered %+v, headers %v", got, rec.Header())
	}
	rec = postTo(check, "/v1/check", `{"domain":"api",`+user+`}`)
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Decision != "deny" {
		t.Fatalf("the check after the charge: %s", rec.Body)
	}
	// every descriptor with hits of its own: no request hits needed
	rec = postTo(charge, "/v1/charge", `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"ada"}],"hits":4}]}`)
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || got.Statuses[0].Remaining != 96 {
		t.Fatalf("per-descriptor hits: %d %s", rec.Code, rec.Body)
	}
}

// TestChargeBadRequests: each bad charge names its field.
func TestChargeBadRequests(t *testing.T) {
	_, charge := newChargeHandlers(t)
	user := `"descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}]`
	cases := []struct {
		name, body string
		status     int
		field      string
	}{
		{"no hits", `{"domain":"api",` + user + `}`, 400, "hits"},
		{"negative hits", `{"domain":"api",` + user + `,"hits":-1}`, 400, "hits"},
		{"no descriptors, no id", `{"domain":"api","hits":1}`, 400, "descriptors"},
		{"an id no check had", `{"domain":"api","hits":1,"request_id":"never"}`, 400, "request_id"},
		{"unknown domain", `{"domain":"nope",` + user + `,"hits":1}`, 400, "domain"},
		{"unknown field", `{"domain":"api",` + user + `,"hits":1,"cost":3}`, 400, "cost"},
		{"payload is a check's", `{"domain":"api",` + user + `,"hits":1,"payload":{}}`, 400, "payload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := postTo(charge, "/v1/charge", c.body)
			var e httpjson.ErrorResponse
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != c.status || e.Field != c.field {
				t.Fatalf("status %d field %q (%s), want %d %q", rec.Code, e.Field, e.Error, c.status, c.field)
			}
		})
	}
	rec := httptest.NewRecorder()
	charge.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/charge", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", rec.Code)
	}
}

// FuzzChargeHandler: any /v1/charge body is answered 200 (the decision
// allow: a charge is never refused), 400, 409 or 413, in JSON, never a
// panic or a 500.
func FuzzChargeHandler(f *testing.F) {
	f.Add(`{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hits":1000}`)
	f.Add(`{"domain":"api","hits":3,"request_id":"r"}`)
	f.Add(`{"domain":"api","descriptors":[{"entries":[{"key":"login","value":"x"}],"hits":4294967296}],"hits":0}`)
	f.Add(`{"domain":"api","descriptors":[],"hits":1}`)
	f.Add(`{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":"a"},{"key":"route","value":"/export"}]}],"hits":9223372036854775807}`)
	_, charge := newChargeHandlers(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := postTo(charge, "/v1/charge", body)
		switch rec.Code {
		case 200:
			var got httpjson.CheckResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Decision != "allow" {
				t.Fatalf("200 answered %q", rec.Body)
			}
		case 400, 409, 413:
			var e httpjson.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%d answered %q", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}
