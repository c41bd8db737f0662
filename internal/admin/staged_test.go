package admin

import (
	"context"
	"strings"
	"testing"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/sink"
)

// TestStagedRollout: a version staged in shadow leaves the live limit in
// force while its own rules go live under the staged domain; promote
// makes it live and ends the staging; each step is audited.
func TestStagedRollout(t *testing.T) {
	h, live, _, _, audit := setupDB(t)
	stagedLimit := func() int64 {
		r := live.Load().Match("shop#staged", []config.Entry{{Key: "user", Value: "u"}})
		if r == nil {
			return -1
		}
		return r.Limit
	}
	steps := []struct {
		method, path, body string
		headers            []string
		status             int
		want               string
		live, staged       int64
	}{
		{"PUT", "/v1/rules/shop", shopDoc("2"), nil, 201, `"version":1`, 2, -1},
		{"PUT", "/v1/rules/shop?stage=shadow&message=try+5", shopDoc("5"), []string{"If-Match", `"1"`}, 200, `"version":2,"stage":"shadow","live_version":1`, 2, 5},
		{"GET", "/v1/rules/shop", "", nil, 200, `"stage":"shadow","live_version":1`, 2, 5},
		{"PUT", "/v1/rules/shop?stage=shadow", shopDoc("5"), []string{"If-Match", "*"}, 200, `"unchanged":true`, 2, 5},
		{"PUT", "/v1/rules/shop?stage=canary", shopDoc("5"), []string{"If-Match", "*"}, 400, `stage: want \"shadow\"`, 2, 5},
		{"PUT", "/v1/rules/shop?stage=shadow", shopDoc("fast"), []string{"If-Match", "*"}, 422, `store:shop@3:4:`, 2, 5},
		{"POST", "/v1/rules/shop/promote", "", []string{"If-Match", `"1"`}, 409, `is at version 2, not 1`, 2, 5},
		{"POST", "/v1/rules/shop/promote", "", nil, 200, `"version":3,"bytes":93,"author":"admin","message":"promote version 2"`, 5, -1},
		{"POST", "/v1/rules/shop/promote", "", nil, 409, `domain \"shop\" has no staged version: version 3 is live`, 5, -1},
		{"PUT", "/v1/rules/shop%23staged", shopDoc("5"), nil, 400, `names a domain's staged rules`, 5, -1},
		{"PUT", "/v1/rules/shop?stag=shadow", shopDoc("6"), []string{"If-Match", "*"}, 400, `stag: unknown query parameter (this endpoint takes message, stage)`, 5, -1},
		{"PUT", "/v1/rules/shop?stage=", shopDoc("6"), []string{"If-Match", "*"}, 400, `stage: want \"shadow\"`, 5, -1},
		{"PUT", "/v1/rules/shop?stage=shadow&stage=shadow", shopDoc("6"), []string{"If-Match", "*"}, 400, `stage: want \"shadow\"`, 5, -1},
		{"DELETE", "/v1/rules/shop?stage=shadow", "", nil, 400, `stage: unknown query parameter (this endpoint takes message)`, 5, -1},
		{"POST", "/v1/rules/shop/rollback?to=1&force=1", "", nil, 400, `force: unknown query parameter`, 5, -1},
	}
	for i, s := range steps {
		rec := sendH(h, s.method, s.path, s.body, s.headers...)
		if rec.Code != s.status || !strings.Contains(rec.Body.String(), s.want) {
			t.Fatalf("step %d %s %s: %d %s, want %d with %s", i, s.method, s.path, rec.Code, rec.Body, s.status, s.want)
		}
		if l, sl := liveLimit(live, "shop"), stagedLimit(); l != s.live || sl != s.staged {
			t.Fatalf("step %d: live %d staged %d, want %d %d", i, l, sl, s.live, s.staged)
		}
	}
	rows, err := audit.RuleChanges(context.Background(), sink.RuleChangesQuery{Domain: "shop", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range rows {
		actions = append(actions, r.Action)
	}
	if strings.Join(actions, ",") != "promote,stage,put" && strings.Join(actions, ",") != "put,stage,promote" {
		t.Fatalf("audited actions %v", actions)
	}
}
