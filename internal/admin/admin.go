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
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/strictjson"
	"github.com/velvetrope/velvetrope/operate"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Keys is what the per-key operator endpoints act on; *operate.Operator
// implements it.
type Keys interface {
	Inspect(ctx context.Context, domain string, entries []config.Entry) (operate.KeyState, error)
	Reset(ctx context.Context, domain string, entries []config.Entry) (operate.ResetResult, error)
	SetControl(ctx context.Context, spec operate.ControlSpec) (counters.Control, error)
	DeleteControl(ctx context.Context, id string) (bool, error)
	Controls() []counters.Control
	ControlFor(domain string, entries []config.Entry) (counters.Control, bool)
	SetPool(ctx context.Context, domain, name string, capacity int64) error
	ResetPool(ctx context.Context, domain, name string) (bool, error)
	Pools(ctx context.Context) []operate.PoolState
}

// Admin serves the endpoints over one rule store.
type Admin struct {
	keys    Keys
	store   *config.Store
	paths   []string // rule files and directories; empty: built in, not reloadable
	tokens  []namedToken
	maxBody int64
	logger  *slog.Logger
	mu      sync.Mutex // one reload at a time
	db      *RulesDB   // nil: no rules store
	dryRuns sync.Mutex // one dry run at a time: each reads up to DryRunMaxRows
}

// New returns the admin endpoints for store, loaded from paths, requiring
// token for state changes (empty: state changes are refused).
func New(store *config.Store, paths []string, token string, maxBody int64, logger *slog.Logger) *Admin {
	a := &Admin{store: store, paths: paths, maxBody: maxBody, logger: logger}
	if token != "" {
		a.tokens = append(a.tokens, namedToken{config.AdminTokenName, []byte(token)})
	}
	return a
}

// namedToken is an admin token and the name its changes are recorded
// under.
type namedToken struct {
	name  string
	token []byte
}

// WithTokens adds named admin tokens (admin.tokens): each is as good as
// the admin token, and a change made with one is recorded under its name.
func (a *Admin) WithTokens(ts []config.NamedToken) *Admin {
	for _, t := range ts {
		if t.Token != "" {
			a.tokens = append(a.tokens, namedToken{t.Name, []byte(t.Token)})
		}
	}
	return a
}

// authorKey carries the name of the token a request was authorized with.
type authorKey struct{}

// authorOf is who a change is recorded under: the name of the token the
// request carried.
func authorOf(r *http.Request) string {
	if n, ok := r.Context().Value(authorKey{}).(string); ok {
		return n
	}
	return config.AdminTokenName
}

// WithKeys enables the per-key endpoints over k: GET /v1/keys,
// POST /v1/keys/reset, GET and POST /v1/controls, DELETE
// /v1/controls/{id}.
func (a *Admin) WithKeys(k Keys) *Admin {
	a.keys = k
	return a
}

// Register adds GET /v1/rules, POST /v1/rules/validate,
// POST /v1/rules/reload and, with WithKeys, the per-key endpoints to mux.
func (a *Admin) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/rules", a.rules)
	mux.HandleFunc("POST /v1/rules/validate", a.authorized("rules.validate", a.validate))
	mux.HandleFunc("POST /v1/rules/reload", a.authorized("rules.reload", a.reload))
	if a.db != nil {
		a.registerRulesDB(mux)
		a.registerClients(mux)
	}
	if a.keys != nil {
		mux.HandleFunc("GET /v1/keys", a.authorized("keys.inspect", a.inspect))
		mux.HandleFunc("POST /v1/keys/reset", a.authorized("keys.reset", a.reset))
		mux.HandleFunc("GET /v1/controls", a.authorized("controls.list", a.listControls))
		mux.HandleFunc("POST /v1/controls", a.authorized("controls.set", a.setControl))
		mux.HandleFunc("DELETE /v1/controls/{id}", a.authorized("controls.delete", a.deleteControl))
		mux.HandleFunc("GET /v1/pools", a.authorized("pools.list", a.listPools))
		mux.HandleFunc("PUT /v1/pools/{domain}/{name}", a.authorized("pools.set", a.setPool))
		mux.HandleFunc("DELETE /v1/pools/{domain}/{name}", a.authorized("pools.reset", a.resetPool))
	}
}

// PoolsJSON is the body of GET /v1/pools.
type PoolsJSON struct {
	Pools []operate.PoolState `json:"pools"`
}

// PoolRequest is the body of PUT /v1/pools/{domain}/{name}.
type PoolRequest struct {
	RequestsPerUnit *int64 `json:"requests_per_unit"`
}

func (a *Admin) listPools(w http.ResponseWriter, r *http.Request) (string, int) {
	ps := a.keys.Pools(r.Context())
	if ps == nil {
		ps = []operate.PoolState{}
	}
	writeJSON(w, http.StatusOK, PoolsJSON{Pools: ps})
	return fmt.Sprintf("listed %d", len(ps)), http.StatusOK
}

// setPool sets a pool's capacity for every checker: what an autoscaler
// or a health signal calls.
func (a *Admin) setPool(w http.ResponseWriter, r *http.Request) (string, int) {
	var pr PoolRequest
	if status, err := a.decode(w, r, poolSchema, &pr); err != nil {
		return refuse(w, status, err)
	}
	if pr.RequestsPerUnit == nil {
		return refuse(w, http.StatusBadRequest, errors.New("requests_per_unit: required"))
	}
	domain, name := r.PathValue("domain"), r.PathValue("name")
	if err := a.keys.SetPool(r.Context(), domain, name, *pr.RequestsPerUnit); err != nil {
		if errors.Is(err, operate.ErrNoPool) {
			return refuse(w, http.StatusNotFound, err)
		}
		return refuseKey(w, err)
	}
	for _, p := range a.keys.Pools(r.Context()) {
		if p.Domain == domain && p.Name == name {
			writeJSON(w, http.StatusOK, p)
		}
	}
	return fmt.Sprintf("pool %s/%s capacity %d", domain, name, *pr.RequestsPerUnit), http.StatusOK
}

func (a *Admin) resetPool(w http.ResponseWriter, r *http.Request) (string, int) {
	domain, name := r.PathValue("domain"), r.PathValue("name")
	had, err := a.keys.ResetPool(r.Context(), domain, name)
	if err != nil {
		if errors.Is(err, operate.ErrNoPool) {
			return refuse(w, http.StatusNotFound, err)
		}
		return refuseKey(w, err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"domain": domain, "name": name, "had_override": had})
	return fmt.Sprintf("pool %s/%s back to the file's capacity (override was in force: %v)", domain, name, had), http.StatusOK
}

// KeyJSON is the body of GET /v1/keys: the counter's state and the
// operator control in force for the descriptor, if any.
type KeyJSON struct {
	operate.KeyState
	Control *counters.Control `json:"control,omitempty"`
}

// inspect answers GET /v1/keys?domain=D&descriptor=k=v[,k2=v2]: the
// counter's state in this instance and in the store.
func (a *Admin) inspect(w http.ResponseWriter, r *http.Request) (string, int) {
	q := r.URL.Query()
	domain, es, err := keyOf(q.Get("domain"), q.Get("descriptor"), nil)
	if err != nil {
		return refuse(w, http.StatusBadRequest, err)
	}
	st, err := a.keys.Inspect(r.Context(), domain, es)
	if err != nil {
		return refuseKey(w, err)
	}
	out := KeyJSON{KeyState: st}
	if ct, ok := a.keys.ControlFor(domain, es); ok {
		out.Control = &ct
	}
	writeJSON(w, http.StatusOK, out)
	return "inspected " + st.Rule, http.StatusOK
}

// KeyRequest names one descriptor in a request body: "descriptor" as
// k=v[,k2=v2], or "entries" when values contain ',' or '='.
type KeyRequest struct {
	Domain     string      `json:"domain"`
	Descriptor string      `json:"descriptor,omitempty"`
	Entries    []EntryJSON `json:"entries,omitempty"`
}

// EntryJSON is one descriptor entry in a request body.
type EntryJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// reset answers POST /v1/keys/reset {"domain":..., "descriptor":...}.
func (a *Admin) reset(w http.ResponseWriter, r *http.Request) (string, int) {
	var kr KeyRequest
	if status, err := a.decode(w, r, keySchema, &kr); err != nil {
		return refuse(w, status, err)
	}
	domain, es, err := keyOf(kr.Domain, kr.Descriptor, kr.Entries)
	if err != nil {
		return refuse(w, http.StatusBadRequest, err)
	}
	res, err := a.keys.Reset(r.Context(), domain, es)
	if err != nil {
		return refuseKey(w, err)
	}
	writeJSON(w, http.StatusOK, res)
	return "reset " + res.CounterKey + " (" + res.Scope + ")", http.StatusOK
}

// ControlRequest is the body of POST /v1/controls.
type ControlRequest struct {
	KeyRequest
	Action string `json:"action"`          // allow | deny | limit
	Limit  int64  `json:"limit,omitempty"` // action limit
	TTL    string `json:"ttl,omitempty"`   // Go duration, e.g. "15m"; empty: until deleted
	Reason string `json:"reason,omitempty"`
}

// ControlsJSON is the body of GET /v1/controls.
type ControlsJSON struct {
	Controls []counters.Control `json:"controls"`
}

func (a *Admin) listControls(w http.ResponseWriter, _ *http.Request) (string, int) {
	cs := a.keys.Controls()
	writeJSON(w, http.StatusOK, ControlsJSON{Controls: cs})
	return fmt.Sprintf("listed %d", len(cs)), http.StatusOK
}

func (a *Admin) setControl(w http.ResponseWriter, r *http.Request) (string, int) {
	var cr ControlRequest
	if status, err := a.decode(w, r, controlSchema, &cr); err != nil {
		return refuse(w, status, err)
	}
	domain, es, err := keyOf(cr.Domain, cr.Descriptor, cr.Entries)
	if err != nil {
		return refuse(w, http.StatusBadRequest, err)
	}
	var ttl time.Duration
	if cr.TTL != "" {
		// ParseDuration refuses what overflows an int64 of nanoseconds;
		// SetControl bounds the rest (operate.MaxControlTTL)
		if ttl, err = time.ParseDuration(cr.TTL); err != nil {
			return refuse(w, http.StatusBadRequest, fmt.Errorf("ttl: want a duration such as 15m or 24h, up to %v, got %q", operate.MaxControlTTL, cr.TTL))
		}
	}
	ct, err := a.keys.SetControl(r.Context(), operate.ControlSpec{Domain: domain, Entries: es, Action: cr.Action,
		Limit: cr.Limit, TTL: ttl, Reason: cr.Reason})
	if err != nil {
		return refuseKey(w, err)
	}
	writeJSON(w, http.StatusCreated, ct)
	// The audit line names the key as stored (hashed where the rule says).
	return fmt.Sprintf("set %s %s on %s %s ttl=%s reason=%q", ct.ID, ct.Action, ct.Domain, entriesText(ct.Entries), or(cr.TTL, "none"), ct.Reason), http.StatusCreated
}

func (a *Admin) deleteControl(w http.ResponseWriter, r *http.Request) (string, int) {
	id := r.PathValue("id")
	ok, err := a.keys.DeleteControl(r.Context(), id)
	switch {
	case err != nil:
		return refuseKey(w, err)
	case !ok:
		return refuse(w, http.StatusNotFound, fmt.Errorf("id: no control %q", id))
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
	return "deleted " + id, http.StatusOK
}

// The shapes of the bodies the admin API takes: decoded strictly (exact
// field names, no duplicates, UTF-8 only), as every client body is.
var (
	poolSchema    = strictjson.MustFor[PoolRequest]()
	keySchema     = strictjson.MustFor[KeyRequest]()
	controlSchema = strictjson.MustFor[ControlRequest]()
)

// decode reads a JSON body of shape s into v, within the body bound;
// the error names the field at fault.
func (a *Admin) decode(w http.ResponseWriter, r *http.Request, s *strictjson.Schema, v any) (int, error) {
	if err := s.Read(w, r, a.maxBody, v); err != nil {
		return err.(*strictjson.Error).Status, err
	}
	return 0, nil
}

// keyOf turns the operator's domain and descriptor (text or entries;
// exactly one) into rule entries.
func keyOf(domain, text string, entries []EntryJSON) (string, []config.Entry, error) {
	if domain == "" {
		return "", nil, errors.New("domain: must not be empty")
	}
	switch {
	case text != "" && len(entries) > 0:
		return "", nil, errors.New("descriptor: give descriptor or entries, not both")
	case text != "":
		es, err := config.ParseDescriptorText(text)
		if err != nil {
			return "", nil, fmt.Errorf("descriptor: %w", err)
		}
		for _, e := range es {
			entries = append(entries, EntryJSON{e.Key, e.Value})
		}
	case len(entries) == 0:
		return "", nil, errors.New("descriptor: must not be empty")
	}
	es := make([]config.Entry, len(entries))
	for i, e := range entries {
		if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
			return "", nil, fmt.Errorf("entries[%d]: not valid UTF-8", i)
		}
		es[i] = config.Entry{Key: e.Key, Value: e.Value}
	}
	return domain, es, nil
}

// refuse writes a client error and returns the audit outcome.
func refuse(w http.ResponseWriter, status int, err error) (string, int) {
	writeJSON(w, status, ErrorsJSON{Error: err.Error()})
	return "refused: " + err.Error(), status
}

// refuseKey maps an operator error: field errors are the caller's, the rest
// the store's.
func refuseKey(w http.ResponseWriter, err error) (string, int) {
	var fe *ratelimit.FieldError
	switch {
	case errors.As(err, &fe):
		return refuse(w, http.StatusBadRequest, err)
	case errors.Is(err, operate.ErrNoControls), errors.Is(err, operate.ErrNoReset):
		return refuse(w, http.StatusNotImplemented, err)
	}
	return refuse(w, http.StatusServiceUnavailable, err)
}

func entriesText(es []config.Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Key + "=" + e.Value)
	}
	return b.String()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
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
			Algorithm: string(r.Algorithm), Mode: string(r.Mode), NearLimit: string(r.NearLimit), Failure: string(r.Failure),
			Shadow: r.Shadow, Replaces: r.Replaces, Throttle: string(r.Throttle.Type)}
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

// validate compiles the posted rule file (YAML) without loading it. It
// sits behind the admin token: compiling is the most expensive thing an
// untrusted body could otherwise make a checker do.
func (a *Admin) validate(w http.ResponseWriter, r *http.Request) (string, int) {
	body, out, status := readLimited(w, r, min(a.maxBody, config.MaxRuleFileBytes), "rule file above the body limit")
	if status != 0 {
		return out, status
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		name = "posted.yaml"
	}
	rs, err := compile(name, body)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, errorsOf("invalid rules", err))
		return "invalid: " + firstLine(err), http.StatusUnprocessableEntity
	}
	writeJSON(w, http.StatusOK, describe(rs))
	return "valid " + strings.Join(rs.Domains(), ","), http.StatusOK
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
	rs, err := a.load()
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, errorsOf("reload refused; the previous rules stay live", err))
		return "refused: " + firstLine(err), http.StatusUnprocessableEntity
	}
	writeJSON(w, http.StatusOK, describe(rs))
	return "reloaded " + strings.Join(rs.Domains(), ","), http.StatusOK
}

// load reads the rule files and makes them live, with the store's
// domains when there is a store.
func (a *Admin) load() (*config.RuleSet, error) {
	if a.db == nil {
		rs, err := config.LoadRules(a.paths...)
		if err == nil {
			a.store.Swap(rs)
		}
		return rs, err
	}
	files, err := config.ReadRuleFiles(a.paths...)
	if err != nil {
		return nil, err
	}
	return a.db.Sources.SetFiles(files)
}

// readLimited reads a body of at most limit bytes; a longer one (by its
// Content-Length before a byte is read, as strictjson.Read does, or as it
// arrives) answers 413 with what, and status is then not 0.
func readLimited(w http.ResponseWriter, r *http.Request, limit int64, what string) (body []byte, out string, status int) {
	tooLarge := func() ([]byte, string, int) {
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
		writeJSON(w, http.StatusRequestEntityTooLarge, ErrorsJSON{Error: fmt.Sprintf("%s (%d bytes)", what, limit)})
		return nil, "too large", http.StatusRequestEntityTooLarge
	}
	if r.ContentLength > limit {
		return tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return tooLarge()
		}
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: "reading the body: " + err.Error()})
		return nil, "unreadable body", http.StatusBadRequest
	}
	return body, "", 0
}

// authorized requires the bearer token, then runs h and audits the call.
func (a *Admin) authorized(action string, h func(http.ResponseWriter, *http.Request) (string, int)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if len(a.tokens) == 0 {
			a.logger.Warn("admin refused", "action", action, "remote", r.RemoteAddr, "reason", "no admin token configured")
			writeJSON(w, http.StatusForbidden, ErrorsJSON{Error: "admin endpoints are disabled: set admin.token (VELVETROPE_ADMIN_TOKEN)"})
			return
		}
		got, ok := bearer(r.Header.Get("Authorization"))
		author := ""
		for _, t := range a.tokens { // every one compared: the time says nothing of which matched
			if subtle.ConstantTimeCompare([]byte(got), t.token) == 1 && author == "" {
				author = t.name
			}
		}
		if !ok || author == "" {
			a.logger.Warn("admin refused", "action", action, "remote", r.RemoteAddr, "reason", "bad or missing bearer token")
			w.Header().Set("WWW-Authenticate", `Bearer realm="velvetrope admin"`)
			writeJSON(w, http.StatusUnauthorized, ErrorsJSON{Error: "a valid bearer token is required"})
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), authorKey{}, author))
		outcome, status := h(w, r)
		a.logger.Info("admin", "action", action, "author", author, "remote", r.RemoteAddr, "status", status, "outcome", outcome)
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

// bearer reads an Authorization header's bearer token; the scheme's name
// is case-insensitive (RFC 9110).
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return tok, true
}
