package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/sink"
)

const shopPlans = "domain: shop\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    plans: {table: customers, limits: {pro: 50, ent: 500}}\n"

// TestClientTableEndpoints: a table is written in batches (a removal is
// plan ""), read whole and per client with what each live rule gives the
// client, refuses bad input naming the field, and needs the token.
func TestClientTableEndpoints(t *testing.T) {
	h, _, _, log, audit := setupDB(t)
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
		{"GET", "/v1/rules/shop/clients/customers", "", 200, `"seq":3,"clients":1,"plans":["gold"]`},
		{"GET", "/v1/rules/shop/clients/customers/lookup", "", 400, `client: no values`},
		{"GET", "/v1/rules/shop/clients/Customers", "", 400, `table: \"Customers\" holds 'C'`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["a"],"plan":"Pro"}]}`, 400, `changes[0].plan: \"Pro\" holds 'P'`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":[""],"plan":"pro"}]}`, 400, `changes[0].client[0]: is empty`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":"acme","plan":"pro"}]}`, 400, `changes[0].client`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["a"],"plan":"pro","extra":1}]}`, 400, `extra`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[]}`, 400, `changes: no changes`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["zed"]}]}`, 400, `changes[0].plan: missing (\"\" removes the client)`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["zed"],"plan":null}]}`, 400, `changes[0].plan: missing`},
		{"POST", "/v1/rules/shop/clients/customers", `{"changes":[{"client":["a","b"],"plan":"pro"}]}`, 400,
			`changes[0].client: 2 values; the rules reading this table name a client by 1 (api_key, rule shop:api_key)`},
		{"GET", "/v1/rules/shop/clients/customers/lookup?client=a&client=b", "", 400, `client: 2 values`},
		{"POST", "/v1/rules/shop/clients/nobody-reads", `{"changes":[{"client":["a","b"],"plan":"pro"}]}`, 200, `"unknown_plans":["pro"]`},
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
	rows, err := audit.RuleChanges(context.Background(), sink.RuleChangesQuery{Domain: "shop", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var clientRows []string
	for _, r := range rows {
		if r.Table != "" {
			clientRows = append(clientRows, fmt.Sprintf("%s %s@%d<-%d +%d -%d %s %q", r.Action, r.Table, r.Version, r.From, r.Added, r.Removed, r.Author, r.Message))
		}
	}
	if want := `[clients nobody-reads@1<-0 +1 -0 admin "" clients customers@3<-2 +0 -1 admin "" clients customers@2<-0 +2 -0 admin "billing sync"]`; fmt.Sprint(clientRows) != want {
		t.Fatalf("audited client writes %v\nwant %s", clientRows, want)
	}
	for _, m := range []struct{ method, path string }{{"POST", "/v1/rules/shop/clients/customers"}, {"GET", "/v1/rules/shop/clients/customers"},
		{"GET", "/v1/rules/shop/clients/customers/lookup?client=zed"}} {
		if rec := sendH(h, m.method, m.path, `{"changes":[{"client":["x"],"plan":"pro"}]}`, "Authorization", "Bearer wrong"); rec.Code != 401 {
			t.Fatalf("%s %s with a wrong token: %d", m.method, m.path, rec.Code)
		}
	}
}

// TestNamedTokens: a change is recorded under the name of the token that
// made it — the version's author, the audit row, the log — and
// admin.token's holder as "admin".
func TestNamedTokens(t *testing.T) {
	h, _, _, log, audit := setupDBTokens(t, []config.NamedToken{{Name: "ci", Token: "ci-tok"}, {Name: "priya@ops", Token: "p-tok"}})
	steps := []struct{ token, body, author string }{
		{"ci-tok", shopDoc("2"), "ci"},
		{"p-tok", shopDoc("3"), "priya@ops"},
		{"tok", shopDoc("4"), "admin"},
	}
	for i, s := range steps {
		rec := sendH(h, "PUT", "/v1/rules/shop", s.body, "If-Match", "*", "Authorization", "Bearer "+s.token)
		if rec.Code/100 != 2 || !strings.Contains(rec.Body.String(), `"author":"`+s.author+`"`) {
			t.Fatalf("step %d: %d %s, want author %s", i, rec.Code, rec.Body, s.author)
		}
		if !strings.Contains(log.String(), "author="+s.author) {
			t.Fatalf("step %d: the log does not name %s:\n%s", i, s.author, log)
		}
	}
	rows, err := audit.RuleChanges(context.Background(), sink.RuleChangesQuery{Domain: "shop", Limit: 10})
	if err != nil || len(rows) != 3 {
		t.Fatalf("audit rows %v %v", rows, err)
	}
	var authors []string
	for _, r := range rows {
		authors = append(authors, r.Author)
	}
	slices.Sort(authors)
	if strings.Join(authors, ",") != "admin,ci,priya@ops" {
		t.Fatalf("audit authors %v", authors)
	}
	if rec := sendH(h, "PUT", "/v1/rules/shop", shopDoc("5"), "If-Match", "*", "Authorization", "Bearer ci-to"); rec.Code != 401 {
		t.Fatalf("a token's prefix: %d", rec.Code)
	}
}
