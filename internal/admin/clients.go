package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/strictjson"
	"github.com/velvetrope/velvetrope/rulestore"
	"github.com/velvetrope/velvetrope/sink"
)

// ClientsRequest is the body of POST /v1/rules/{domain}/clients/{table}:
// changes applied in order (plan "" removes a client), and why.
type ClientsRequest struct {
	Changes []ClientChangeJSON `json:"changes"`
	Message string             `json:"message,omitempty"`
}

// ClientChangeJSON is one change of ClientsRequest. Plan is required:
// "" removes the client (a change that forgot its plan must not).
type ClientChangeJSON struct {
	Client []string `json:"client"`
	Plan   *string  `json:"plan"`
}

// ClientsJSON answers a write of client changes.
type ClientsJSON struct {
	Domain  string `json:"domain"`
	Table   string `json:"table"`
	Seq     int64  `json:"seq"`
	Changes int    `json:"changes"`
	// UnknownPlans are plans of the write that no live rule reading the
	// table names: their clients are held to the rules' own limits.
	UnknownPlans []string `json:"unknown_plans,omitempty"`
}

// TableRuleJSON is a live rule that reads a table, and its plans' limits.
type TableRuleJSON struct {
	Rule   string           `json:"rule"`
	Limit  int64            `json:"limit"` // a client without a plan
	Unit   string           `json:"unit"`
	Plans  map[string]int64 `json:"plans"`
	Client []string         `json:"client"` // the descriptor keys whose values name a client
}

// TableJSON is the body of GET /v1/rules/{domain}/clients/{table}.
type TableJSON struct {
	rulestore.TableInfo
	Rules []TableRuleJSON `json:"rules"`
}

// ClientJSON is the body of GET /v1/rules/{domain}/clients/{table}/lookup.
type ClientJSON struct {
	Client []string `json:"client"`
	Plan   string   `json:"plan,omitempty"`
	Found  bool     `json:"found"`
	// Limits is each live rule's limit for this client.
	Limits map[string]int64 `json:"limits"`
}

var clientsSchema = strictjson.MustFor[ClientsRequest](
	strictjson.Bound{Path: "changes", Max: rulestore.MaxClientChanges, What: "changes"},
	strictjson.Bound{Path: "changes.client", Max: rulestore.MaxClientValues, What: "values"},
	strictjson.Bound{Path: "changes.plan", Max: config.MaxPlanNameBytes, What: "bytes"},
	strictjson.Bound{Path: "message", Max: rulestore.MaxMessageBytes, What: "bytes"},
)

func (a *Admin) registerClients(mux *http.ServeMux) {
	// a client's plan is its contract with the operator: reading one
	// takes the token too
	mux.HandleFunc("GET /v1/rules/{domain}/clients/{table}", a.authorized("clients.read", a.getTable))
	mux.HandleFunc("GET /v1/rules/{domain}/clients/{table}/lookup", a.authorized("clients.lookup", a.lookupClient))
	mux.HandleFunc("POST /v1/rules/{domain}/clients/{table}", a.authorized("clients.set", a.setClients))
}

// tableRules are the live rules that read a table.
func (a *Admin) tableRules(domain, table string) []*config.Rule {
	var out []*config.Rule
	for _, r := range a.store.Load().Rules() {
		if config.BaseDomain(r.Domain) == domain && r.Plans != nil && r.Plans.Table == table { // staged rules too
			out = append(out, r)
		}
	}
	return out
}

func (a *Admin) getTable(w http.ResponseWriter, r *http.Request) (string, int) {
	domain, table := r.PathValue("domain"), r.PathValue("table")
	info, err := a.db.Store.Table(r.Context(), domain, table)
	if err != nil {
		return storeError(w, rulestore.Version{Domain: domain}, err)
	}
	out := TableJSON{TableInfo: info}
	if out.Plans == nil {
		out.Plans = []string{}
	}
	out.Rules = tableRulesJSON(a.tableRules(domain, table))
	writeJSON(w, http.StatusOK, out)
	return fmt.Sprintf("%d clients", info.Clients), http.StatusOK
}

func (a *Admin) lookupClient(w http.ResponseWriter, r *http.Request) (string, int) {
	domain, table := r.PathValue("domain"), r.PathValue("table")
	client := r.URL.Query()["client"]
	if msg := ArityProblem(tableRulesJSON(a.tableRules(domain, table)), len(client)); msg != "" && len(client) > 0 {
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: "client: " + msg})
		return "bad client", http.StatusBadRequest
	}
	plan, found, err := a.db.Store.ClientPlan(r.Context(), domain, table, client)
	if err != nil {
		return storeError(w, rulestore.Version{Domain: domain}, err)
	}
	out := ClientJSON{Client: client, Plan: plan, Found: found, Limits: map[string]int64{}}
	for _, rule := range a.tableRules(domain, table) {
		out.Limits[rule.ID] = rule.Limit
		if pr := rule.Plans.Rules[plan]; found && pr != nil {
			out.Limits[rule.ID] = pr.Limit
		}
	}
	writeJSON(w, http.StatusOK, out)
	return "found " + strconv.FormatBool(found), http.StatusOK
}

// setClients writes a batch of client changes.
func (a *Admin) setClients(w http.ResponseWriter, r *http.Request) (string, int) {
	domain, table := r.PathValue("domain"), r.PathValue("table")
	var in ClientsRequest
	if status, err := a.decode(w, r, clientsSchema, &in); err != nil {
		writeJSON(w, status, ErrorsJSON{Error: err.Error()})
		return "bad body", status
	}
	rules := a.tableRules(domain, table)
	described := tableRulesJSON(rules)
	changes := make([]rulestore.ClientChange, len(in.Changes))
	for i, c := range in.Changes {
		if c.Plan == nil {
			writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: fmt.Sprintf("changes[%d].plan: missing (\"\" removes the client)", i)})
			return "bad body", http.StatusBadRequest
		}
		if msg := ArityProblem(described, len(c.Client)); msg != "" {
			writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: fmt.Sprintf("changes[%d].client: %s", i, msg)})
			return "bad body", http.StatusBadRequest
		}
		changes[i] = rulestore.ClientChange{Client: c.Client, Plan: *c.Plan}
	}
	seq, err := a.db.Store.SetClients(r.Context(), domain, table, changes)
	if err != nil {
		return storeError(w, rulestore.Version{Domain: domain}, err)
	}
	out := ClientsJSON{Domain: domain, Table: table, Seq: seq, Changes: len(in.Changes)}
	if a.db.ClientsApplied != nil && len(rules) > 0 { // this checker enforces it before it answers, as a rules write
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		a.db.ClientsApplied(ctx, domain, table, seq)
		cancel()
	}
	for _, c := range changes {
		if c.Plan == "" || slices.Contains(out.UnknownPlans, c.Plan) {
			continue
		}
		known := false
		for _, rule := range rules {
			known = known || rule.Plans.Rules[c.Plan] != nil
		}
		if !known {
			out.UnknownPlans = append(out.UnknownPlans, c.Plan)
		}
	}
	a.logger.Info("client plans changed", "domain", domain, "table", table, "changes", len(in.Changes), "seq", seq,
		"author", authorOf(r), "message", in.Message)
	if a.db.Audit != nil {
		rc := sink.RuleChange{Time: time.Now().UTC(), Domain: domain, Table: table, Version: seq, From: seq - int64(len(changes)),
			Action: "clients", Author: authorOf(r), Message: in.Message}
		for _, c := range changes {
			if c.Plan == "" {
				rc.Removed++
			} else {
				rc.Added++
			}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		if err := a.db.Audit(ctx, rc); err != nil {
			a.logger.Warn("client plans change not audited in analytics (it is in this log)", "domain", domain, "table", table, "seq", seq, "error", err)
		}
		cancel()
	}
	writeJSON(w, http.StatusOK, out)
	return fmt.Sprintf("%d changes, seq %s", len(in.Changes), strconv.FormatInt(seq, 10)), http.StatusOK
}

// tableRulesJSON describes the rules reading a table: each plan's limit
// and the keys whose values name a client.
func tableRulesJSON(rules []*config.Rule) []TableRuleJSON {
	out := []TableRuleJSON{}
	for _, rule := range rules {
		tr := TableRuleJSON{Rule: rule.ID, Limit: rule.Limit, Unit: rule.Unit.String(), Plans: map[string]int64{}}
		for name, pr := range rule.Plans.Rules {
			tr.Plans[name] = pr.Limit
		}
		for _, i := range rule.Plans.Client {
			tr.Client = append(tr.Client, rule.Path[i].Key)
		}
		out = append(out, tr)
	}
	return out
}

// ArityProblem says why a client of n values is no client of the rules
// reading a table ("" when it is one, or no rule reads the table yet: a
// table may be filled before its rules go live). The API checks each
// change with it, and `rules clients --import` each row before it sends
// any.
func ArityProblem(rules []TableRuleJSON, n int) string {
	var want []string
	for _, r := range rules {
		if len(r.Client) == n {
			return ""
		}
		want = append(want, fmt.Sprintf("%d (%s, rule %s)", len(r.Client), strings.Join(r.Client, ", "), r.Rule))
	}
	if len(want) == 0 {
		return ""
	}
	return fmt.Sprintf("%d values; the rules reading this table name a client by %s", n, strings.Join(want, " or "))
}
