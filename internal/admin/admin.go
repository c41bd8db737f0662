// Package admin serves the operator endpoints of a checker process: the
// effective rules, validation of a candidate rule file, and an immediate
// reload. Endpoints that change state require the configured bearer token
// and are written to the log (who, what, outcome; never the token).
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/velvetrope/velvetrope/checker"
	"github.com/velvetrope/velvetrope/client"
	"github.com/velvetrope/velvetrope/config"
)

// Inspector reports a counter's state; *checker.Checker implements it.
type Inspector interface {
	Inspect(ctx context.Context, domain string, entries []config.Entry) (checker.KeyState, error)
}

// Admin serves the endpoints over one rule store.
type Admin struct {
	inspector Inspector
	store     *config.Store
	paths     []string // rule files and directories; empty: built in, not reloadable
	token     []byte
	maxBody   int64
	logger    *slog.Logger
	mu        sync.Mutex // one reload at a time
}

// New returns the admin endpoints for store, loaded from paths, requiring
// token for state changes (empty: state changes are refused).
func New(store *config.Store, paths []string, token string, maxBody int64, logger *slog.Logger) *Admin {
	return &Admin{store: store, paths: paths, token: []byte(token), maxBody: maxBody, logger: logger}
}

// WithInspector enables GET /v1/keys over i.
func (a *Admin) WithInspector(i Inspector) *Admin {
	a.inspector = i
	return a
}

// Register adds GET /v1/rules, POST /v1/rules/validate,
// POST /v1/rules/reload and, with an inspector, GET /v1/keys to mux.
func (a *Admin) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/rules", a.rules)
	mux.HandleFunc("POST /v1/rules/validate", a.validate)
	mux.HandleFunc("POST /v1/rules/reload", a.authorized("rules.reload", a.reload))
	if a.inspector != nil {
		mux.HandleFunc("GET /v1/keys", a.authorized("keys.inspect", a.inspect))
	}
}

// inspect answers GET /v1/keys?domain=D&descriptor=k=v[,k2=v2]: the
// counter's state in this instance and in the store.
func (a *Admin) inspect(w http.ResponseWriter, r *http.Request) (string, int) {
	q := r.URL.Query()
	domain := q.Get("domain")
	d, err := client.ParseDescriptor(q.Get("descriptor"))
	if err == nil && domain == "" {
		err = errors.New("domain: must not be empty")
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: err.Error()})
		return "bad request", http.StatusBadRequest
	}
	es := make([]config.Entry, len(d.Entries))
	for i, e := range d.Entries {
		es[i] = config.Entry{Key: e.Key, Value: e.Value}
	}
	st, err := a.inspector.Inspect(r.Context(), domain, es)
	var fe *checker.FieldError
	switch {
	case errors.As(err, &fe):
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: err.Error()})
		return "refused: " + err.Error(), http.StatusBadRequest
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, ErrorsJSON{Error: err.Error()})
		return "store: " + err.Error(), http.StatusServiceUnavailable
	}
	writeJSON(w, http.StatusOK, st)
	return "inspected " + st.Rule, http.StatusOK
}

// RuleJSON is one effective rule as GET /v1/rules shows it.
type RuleJSON struct {
	ID        string   `json:"id"`
	Domain    string   `json:"domain"`
	Name      string   `json:"name,omitempty"`
	Limit     int64    `json:"limit"`
	Unit      string   `json:"unit,omitempty"`
	Unlimited bool     `json:"unlimited,omitempty"`
	Algorithm string   `json:"algorithm,omitempty"` // empty: Envoy's fixed window
	Mode      string   `json:"mode"`
	NearLimit string   `json:"near_limit,omitempty"`
	Failure   string   `json:"failure"`
	Shadow    bool     `json:"shadow_mode,omitempty"`
	Replaces  []string `json:"replaces,omitempty"`
	Throttle  string   `json:"throttle"`
	Source    string   `json:"source,omitempty"` // file:line:column
}

// RulesJSON is the body of GET /v1/rules and of a successful validation
// or reload.
type RulesJSON struct {
	Files   []string   `json:"files,omitempty"`
	Domains []string   `json:"domains"`
	Rules   []RuleJSON `json:"rules"`
}

// ErrorsJSON is the body of a refused validation or reload.
type ErrorsJSON struct {
	Error  string   `json:"error"`
	Errors []string `json:"errors,omitempty"` // file:line:column: reason
}

func describe(rs *config.RuleSet) RulesJSON {
	out := RulesJSON{Files: rs.Files(), Domains: rs.Domains(), Rules: make([]RuleJSON, 0, len(rs.Rules()))}
	for _, r := range rs.Rules() {
		rj := RuleJSON{ID: r.ID, Domain: r.Domain, Name: r.Name, Limit: r.Limit, Unlimited: r.Unlimited,
			Algorithm: r.Algorithm, Mode: r.Mode, NearLimit: r.NearLimit, Failure: r.Failure, Shadow: r.Shadow,
			Replaces: r.Replaces, Throttle: r.Throttle.Type}
		if !r.Unlimited {
			rj.Unit = r.Unit.String()
		}
		if r.Pos.File != "" {
			rj.Source = r.Pos.String()
		}
		out.Rules = append(out.Rules, rj)
	}
	return out
}

func (a *Admin) rules(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, describe(a.store.Load()))
}

// validate compiles the posted rule file (YAML) without loading it.
func (a *Admin) validate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, ErrorsJSON{Error: "rule file above the body limit"})
			return
		}
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: "reading the body: " + err.Error()})
		return
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		name = "posted.yaml"
	}
	rs, err := compile(name, body)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, errorsOf("invalid rules", err))
		return
	}
	writeJSON(w, http.StatusOK, describe(rs))
}

func compile(name string, body []byte) (*config.RuleSet, error) {
	f, err := config.ParseRules(name, body)
	if err != nil {
		return nil, err
	}
	return config.Compile([]*config.File{f})
}

// reload loads the rule files now; on error the live rules stay.
func (a *Admin) reload(w http.ResponseWriter, _ *http.Request) (string, int) {
	if len(a.paths) == 0 {
		writeJSON(w, http.StatusConflict, ErrorsJSON{Error: "no rule files configured (built-in rules): nothing to reload"})
		return "no rule files", http.StatusConflict
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rs, err := config.LoadRules(a.paths...)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, errorsOf("reload refused; the previous rules stay live", err))
		return "refused: " + firstLine(err), http.StatusUnprocessableEntity
	}
	a.store.Swap(rs)
	writeJSON(w, http.StatusOK, describe(rs))
	return "reloaded " + strings.Join(rs.Domains(), ","), http.StatusOK
}

// authorized requires the bearer token, then runs h and audits the call.
func (a *Admin) authorized(action string, h func(http.ResponseWriter, *http.Request) (string, int)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if len(a.token) == 0 {
			a.logger.Warn("admin refused", "action", action, "remote", r.RemoteAddr, "reason", "no admin token configured")
			writeJSON(w, http.StatusForbidden, ErrorsJSON{Error: "admin endpoints are disabled: set admin.token (VELVETROPE_ADMIN_TOKEN)"})
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), a.token) != 1 {
			a.logger.Warn("admin refused", "action", action, "remote", r.RemoteAddr, "reason", "bad or missing bearer token")
			w.Header().Set("WWW-Authenticate", `Bearer realm="velvetrope admin"`)
			writeJSON(w, http.StatusUnauthorized, ErrorsJSON{Error: "a valid bearer token is required"})
			return
		}
		outcome, status := h(w, r)
		a.logger.Info("admin", "action", action, "remote", r.RemoteAddr, "status", status, "outcome", outcome)
	}
}

func errorsOf(msg string, err error) ErrorsJSON {
	out := ErrorsJSON{Error: msg}
	var list config.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			out.Errors = append(out.Errors, e.Error())
		}
	} else {
		out.Errors = []string{err.Error()}
	}
	return out
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
