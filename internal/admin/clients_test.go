package admin

import (
	"encoding/json"
	"strings"
	"testing"
)

const shopPlans = "domain: shop\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    plans: {table: customers, limits: {pro: 50, ent: 500}}\n"

// TestClientTableEndpoints: a table is written in batches (a removal is
// plan ""), read whole and per client with what each live rule gives the
// client, refuses bad input naming the field, and needs the token.
func TestClientTableEndpoints(t *testing.T) {
	h, _, _, log, _ := setupDB(t)
	if rec := sendH(h, "PUT", "/v1/rules/shop", shopPlans); rec.Code != 201 {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	steps := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/v1/rules/shop/clients/customers", "", 200, `"seq":0,"clients":0,"plans":[],"rules":[{"rule":"shop:api_key","limit":5,"unit":"minute","plans":{"ent":500,"pro":50},"client":["api_key"]}]`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["acme"],"plan":"pro"},{"client":["zed"],"plan":"gold"}],"message":"billing sync"}`, 200,
			`{"domain":"shop","table":"customers","seq":2,"changes":2,"unknown_plans":["gold"]}`},
		{"GET", "/v1/rules/shop/clients/customers/lookup?client=acme", "", 200, `{"client":["acme"],"plan":"pro","found":true,"limits":{"shop:api_key":50}}`},
		{"GET", "/v1/rules/shop/clients/customers/lookup?client=zed", "", 200, `"plan":"gold","found":true,"limits":{"shop:api_key":5}`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["acme"],"plan":""}]}`, 200, `"seq":3`},
		{"GET", "/v1/rules/shop/clients/customers/lookup?client=acme", "", 200, `{"client":["acme"],"found":false,"limits":{"shop:api_key":5}}`},
		{"GET", "/v1/rules/shop/clients/customers", "", 200, `"seq":3,"clients":1,"plans":["gold","pro"]`},
		{"GET", "/v1/rules/shop/clients/customers/lookup", "", 400, `client: no values`},
		{"GET", "/v1/rules/shop/clients/Customers", "", 400, `table: \"Customers\" holds 'C'`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["a"],"plan":"Pro"}]}`, 400, `changes[0].plan: \"Pro\" holds 'P'`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":[""],"plan":"pro"}]}`, 400, `changes[0].client[0]: is empty`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":"acme","plan":"pro"}]}`, 400, `changes[0].client`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["a"],"plan":"pro","extra":1}]}`, 400, `extra`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[]}`, 400, `changes: no changes`},
	}
	for i, s := range steps {
		rec := sendH(h, s.method, s.path, s.body)
		if rec.Code != s.status || !strings.Contains(rec.Body.String(), s.want) {
			t.Fatalf("step %d %s %s: %d %s, want %d with %s", i, s.method, s.path, rec.Code, rec.Body, s.status, s.want)
		}
		if rec.Code == 200 && s.method == "GET" && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("step %d: not JSON", i)
		}
	}
	if !strings.Contains(log.String(), `msg="client plans changed" domain=shop table=customers changes=2 seq=2 author=admin message="billing sync"`) {
		t.Fatalf("the change is not in the log:\n%s", log)
	}
	for _, m := range []struct{ method, path string }{{"POST", "/v1/rules/shop/clients/customers"}, {"GET", "/v1/rules/shop/clients/customers"},
		{"GET", "/v1/rules/shop/clients/customers/lookup?client=zed"}} {
		if rec := sendH(h, m.method, m.path, `{"changes":[{"client":["x"],"plan":"pro"}]}`, "Authorization", "Bearer wrong"); rec.Code != 401 {
			t.Fatalf("%s %s with a wrong token: %d", m.method, m.path, rec.Code)
		}
	}
}
