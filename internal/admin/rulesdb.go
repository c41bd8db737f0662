package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/analytics"
	"github.com/velvetrope/velvetrope/internal/dryrun"
	"github.com/velvetrope/velvetrope/internal/linediff"
	"github.com/velvetrope/velvetrope/plantable"
	"github.com/velvetrope/velvetrope/rulestore"
	"github.com/velvetrope/velvetrope/rulesync"
	"github.com/velvetrope/velvetrope/sink"
)

// RulesDB is the rules database the store endpoints act on: the store,
// the sources a candidate is compiled with, and what applies a version
// here at once (the follower; nil: the change feed brings it).
type RulesDB struct {
	Store   *rulestore.Store
	Sources *rulesync.Sources
	Apply   func(ctx context.Context, domain string)
	// ClientsApplied waits (bounded by ctx) until this process holds a
	// client table up to a sequence number it just wrote (nil: the
	// followers bring it).
	ClientsApplied func(ctx context.Context, domain, table string, seq int64) bool
	// MaxDocumentBytes bounds a PUT's body (rules_store.max_document_bytes).
	MaxDocumentBytes int64
	// Audit records each change (nil: the store's history and the log
	// only). A failure is logged; the change stands.
	Audit func(ctx context.Context, c sink.RuleChange) error
	// Demand is the usage a dry run replays (nil: dry runs answer 503),
	// MaxWindow the longest window one may replay (analytics.max_window).
	Demand    sink.Demander
	MaxWindow time.Duration
	// Plans are this process's client tables: a dry run decides each
	// client of a rule with plans at its plan's limit (nil: at the rule's).
	Plans *plantable.Tables
}

// DryRunMaxRows bounds the usage rows one dry run reads (a key's minute
// each; about 100 MB at the bound): a longer window answers 422.
const DryRunMaxRows = 1_000_000

// WithRulesDB enables the rules store's endpoints: GET, PUT and DELETE
// /v1/rules/{domain}, GET /v1/rules/{domain}/history, GET
// /v1/rules/{domain}/versions/{version} and POST
// /v1/rules/{domain}/rollback. POST /v1/rules/reload then compiles the
// files with the store's domains.
func (a *Admin) WithRulesDB(db RulesDB) *Admin {
	a.db = &db
	return a
}

func (a *Admin) registerRulesDB(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/rules/{domain}", a.getDoc)
	mux.HandleFunc("GET /v1/rules/{domain}/history", a.history)
	mux.HandleFunc("GET /v1/rules/{domain}/versions/{version}", a.getVersion)
	mux.HandleFunc("PUT /v1/rules/{domain}", a.authorized("rules.put", a.putDoc))
	mux.HandleFunc("DELETE /v1/rules/{domain}", a.authorized("rules.delete", a.deleteDoc))
	mux.HandleFunc("POST /v1/rules/{domain}/rollback", a.authorized("rules.rollback", a.rollback))
	mux.HandleFunc("POST /v1/rules/{domain}/promote", a.authorized("rules.promote", a.promote))
	mux.HandleFunc("POST /v1/rules/{domain}/dry-run", a.authorized("rules.dry-run", a.dryRun))
}

// DryRunJSON is the answer of POST /v1/rules/{domain}/dry-run.
type DryRunJSON struct {
	Window string    `json:"window"`
	Since  time.Time `json:"since"`
	dryrun.Report
}

// dryRun evaluates the posted document against the window's usage.
func (a *Admin) dryRun(w http.ResponseWriter, r *http.Request) (string, int) {
	domain := r.PathValue("domain")
	if a.db.Demand == nil {
		writeJSON(w, http.StatusServiceUnavailable, ErrorsJSON{Error: "a dry run replays the analytics' usage: set clickhouse.addr (VELVETROPE_CLICKHOUSE_ADDR) on the checker"})
		return "no analytics", http.StatusServiceUnavailable
	}
	win := r.URL.Query().Get("window")
	if win == "" {
		win = "24h"
	}
	d, err := analytics.ParseWindow(win, a.db.MaxWindow)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: "window: " + err.Error()})
		return "bad window", http.StatusBadRequest
	}
	body, out, status := a.readBody(w, r)
	if status != 0 {
		return out, status
	}
	f, err := config.ParseRules("dry-run:"+domain, body)
	var rs *config.RuleSet
	if err == nil && f.Domain != domain {
		err = fmt.Errorf("the document's domain %q is not %q", f.Domain, domain)
	}
	if err == nil {
		rs, err = config.Compile([]*config.File{f})
	}
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, errorsOf("invalid rules", err))
		return "invalid: " + firstLine(err), http.StatusUnprocessableEntity
	}
	if !a.dryRuns.TryLock() {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, ErrorsJSON{Error: "another dry run is running on this checker: try again shortly"})
		return "busy", http.StatusServiceUnavailable
	}
	defer a.dryRuns.Unlock()
	since := time.Now().Add(-d).Truncate(time.Minute)
	rows, err := a.db.Demand.Demand(r.Context(), sink.DemandQuery{Domain: domain, Since: since, MaxRows: DryRunMaxRows})
	if errors.Is(err, sink.ErrTooMuchDemand) {
		writeJSON(w, http.StatusUnprocessableEntity, ErrorsJSON{Error: fmt.Sprintf("window: %s of domain %q holds more than %d keys' minutes: try a shorter window", win, domain, DryRunMaxRows)})
		return "too much usage", http.StatusUnprocessableEntity
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, ErrorsJSON{Error: "the analytics store did not answer: " + err.Error()})
		return "analytics error", http.StatusServiceUnavailable
	}
	var plans func(*config.Rule, []config.Entry) *config.Rule
	if a.db.Plans != nil {
		plans = a.db.Plans.Resolve
	}
	rep, err := dryrun.Evaluate(rs, domain, rows, plans)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, ErrorsJSON{Error: err.Error()})
		return "invalid", http.StatusUnprocessableEntity
	}
	writeJSON(w, http.StatusOK, DryRunJSON{Window: win, Since: since.UTC(), Report: rep})
	return fmt.Sprintf("dry run of %d keys", rep.Keys), http.StatusOK
}

// VersionJSON is one version of a domain's rules as the store endpoints
// show it; Body is left out of a history.
type VersionJSON struct {
	Domain  string `json:"domain"`
	Version int64  `json:"version"`
	Deleted bool   `json:"deleted,omitempty"`
	// Stage is "shadow" for a staged version: it enforces nothing until
	// promoted; LiveVersion is the version whose rules stay in force.
	Stage       string    `json:"stage,omitempty"`
	LiveVersion int64     `json:"live_version,omitempty"`
	Body        string    `json:"body,omitempty"`
	Bytes       int       `json:"bytes"`
	Author      string    `json:"author,omitempty"`
	Message     string    `json:"message,omitempty"`
	Time        time.Time `json:"time"`
	Unchanged   bool      `json:"unchanged,omitempty"` // a PUT of the current document: no new version
}

// HistoryJSON is the body of GET /v1/rules/{domain}/history.
type HistoryJSON struct {
	Domain   string        `json:"domain"`
	Kept     int           `json:"kept"` // versions the store keeps of a domain
	Versions []VersionJSON `json:"versions"`
}

// ConflictJSON is a 409's body: the write expected another version.
type ConflictJSON struct {
	Error   string `json:"error"`
	Current int64  `json:"current_version"`
}

func versionJSON(v rulestore.Version, body bool) VersionJSON {
	out := VersionJSON{Domain: v.Domain, Version: v.Version, Deleted: v.Deleted, Bytes: len(v.Body), Author: v.Author,
		Message: v.Message, Time: v.Time, Stage: v.Stage, LiveVersion: v.LiveVersion}
	if body {
		out.Body = v.Body
	}
	return out
}

func etag(v int64) string { return `"` + strconv.FormatInt(v, 10) + `"` }

// storeError answers an error of the store: input 400, conflict 409, no
// rules 404, anything else (the store unreachable) 503.
func storeError(w http.ResponseWriter, v rulestore.Version, err error) (string, int) {
	var in *rulestore.InputError
	var c *rulestore.ConflictError
	switch {
	case errors.As(err, &in):
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: in.Field + ": " + in.Msg})
		return "bad input: " + in.Field, http.StatusBadRequest
	case errors.As(err, &c):
		w.Header().Set("ETag", etag(c.Current))
		msg := fmt.Sprintf("domain %q is at version %d, not %d: read it again (GET /v1/rules/%s), then write with If-Match: \"%d\"", c.Domain, c.Current, c.IfMatch, url.PathEscape(c.Domain), c.Current)
		if c.IfMatch == 0 {
			msg = fmt.Sprintf("domain %q is already in the store at version %d: a PUT without If-Match only creates; send If-Match: \"%d\" to replace that version (or * for whatever is current)", c.Domain, c.Current, c.Current)
		}
		writeJSON(w, http.StatusConflict, ConflictJSON{Error: msg, Current: c.Current})
		return fmt.Sprintf("conflict at version %d", c.Current), http.StatusConflict
	case errors.Is(err, rulestore.ErrNotFound):
		body := ConflictJSON{Error: fmt.Sprintf("no rules for domain %q in the store", v.Domain)}
		if v.Deleted {
			body.Error = fmt.Sprintf("domain %q was deleted at version %d", v.Domain, v.Version)
			body.Current = v.Version
			w.Header().Set("ETag", etag(v.Version))
		}
		writeJSON(w, http.StatusNotFound, body)
		return "not found", http.StatusNotFound
	}
	writeJSON(w, http.StatusServiceUnavailable, ErrorsJSON{Error: "rules store unavailable: " + err.Error()})
	return "store error: " + firstLine(err), http.StatusServiceUnavailable
}

func (a *Admin) getDoc(w http.ResponseWriter, r *http.Request) {
	domain := r.PathValue("domain")
	v, err := a.db.Store.Get(r.Context(), domain)
	if err != nil {
		if errors.Is(err, rulestore.ErrNotFound) {
			v.Domain = domain
		}
		storeError(w, v, err)
		return
	}
	w.Header().Set("ETag", etag(v.Version))
	writeJSON(w, http.StatusOK, versionJSON(v, true))
}

func (a *Admin) history(w http.ResponseWriter, r *http.Request) {
	domain := r.PathValue("domain")
	n := 0
	if s := r.URL.Query().Get("limit"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: fmt.Sprintf("limit: want a count of versions (1 or more), got %q", s)})
			return
		}
	}
	vs, err := a.db.Store.History(r.Context(), domain, n)
	if err != nil {
		storeError(w, rulestore.Version{Domain: domain}, err)
		return
	}
	out := HistoryJSON{Domain: domain, Kept: a.db.Store.Keep(), Versions: make([]VersionJSON, 0, len(vs))}
	for _, v := range vs {
		out.Versions = append(out.Versions, versionJSON(v, false))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Admin) getVersion(w http.ResponseWriter, r *http.Request) {
	domain, s := r.PathValue("domain"), r.PathValue("version")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: fmt.Sprintf("version: want a version number (1 or more), got %q", s)})
		return
	}
	v, err := a.db.Store.At(r.Context(), domain, n)
	if err != nil {
		var in *rulestore.InputError
		if errors.As(err, &in) && in.Field == "version" {
			writeJSON(w, http.StatusNotFound, ErrorsJSON{Error: in.Field + ": " + in.Msg})
			return
		}
		storeError(w, rulestore.Version{Domain: domain}, err)
		return
	}
	w.Header().Set("ETag", etag(v.Version))
	writeJSON(w, http.StatusOK, versionJSON(v, true))
}

// ifMatch reads If-Match: a version as its ETag ("3", or 3), * for
// whatever is current; absent: def. A weak tag never matches (RFC 9110:
// If-Match compares strongly), so it is refused rather than taken.
func ifMatch(r *http.Request, def int64) (int64, error) {
	vs := r.Header.Values("If-Match")
	if len(vs) > 1 {
		return 0, errors.New("If-Match: given more than once; send one version")
	}
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" {
		return def, nil
	}
	if h == "*" {
		return rulestore.Any, nil
	}
	bad := fmt.Errorf("If-Match: want a version such as \"3\" (the ETag of GET /v1/rules/{domain}) or *, got %q", h)
	if strings.HasPrefix(h, "W/") {
		return 0, fmt.Errorf("If-Match: a weak tag never matches (the store's ETags are strong), got %q", h)
	}
	v := h
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if v == "" || len(v) > 19 || (len(v) > 1 && v[0] == '0') || strings.TrimLeft(v, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, bad
	}
	return n, nil
}

// message is the change's reason: ?message=, or the X-Change-Message header.
func message(r *http.Request) string {
	if m := r.URL.Query().Get("message"); m != "" {
		return m
	}
	return r.Header.Get("X-Change-Message")
}

// putDoc stores the body as the domain's next version, once it compiles
// with every other live rule. Without If-Match it only creates.
func (a *Admin) putDoc(w http.ResponseWriter, r *http.Request) (string, int) {
	domain := r.PathValue("domain")
	match, out, status := writeArgs(w, r, 0, "message", "stage")
	if status != 0 {
		return out, status
	}
	stage := r.URL.Query().Get("stage")
	if vs, ok := r.URL.Query()["stage"]; ok && (len(vs) != 1 || stage != rulestore.StageShadow) {
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: fmt.Sprintf("stage: want %q (the version enforces nothing until promoted) or none, got %q", rulestore.StageShadow, stage)})
		return "bad stage", http.StatusBadRequest
	}
	body, out, status := a.readBody(w, r)
	if status != 0 {
		return out, status
	}
	return a.write(w, r, domain, string(body), match, message(r), stage)
}

// write validates and stores one document (PUT and rollback).
func (a *Admin) write(w http.ResponseWriter, r *http.Request, domain, body string, match int64, msg, stage string) (string, int) {
	if path, ok := a.db.Sources.FileDomain(domain); ok {
		writeJSON(w, http.StatusConflict, ErrorsJSON{Error: fmt.Sprintf("domain %q is defined in the rule file %s: a domain lives in files or in the store, not both", domain, path)})
		return "domain in a file", http.StatusConflict
	}
	cur, err := a.db.Store.Get(r.Context(), domain)
	created := errors.Is(err, rulestore.ErrNotFound)
	if err != nil && !created {
		return storeError(w, rulestore.Version{Domain: domain}, err)
	}
	if err == nil && cur.Body == body && cur.Stage == stage && (match == rulestore.Any || match == cur.Version) {
		// the same document again (a CI push of an unchanged tree): no new version
		w.Header().Set("ETag", etag(cur.Version))
		out := versionJSON(cur, false)
		out.Unchanged = true
		writeJSON(w, http.StatusOK, out)
		return fmt.Sprintf("unchanged at version %d", cur.Version), http.StatusOK
	}
	next := cur.Version + 1
	if match != rulestore.Any {
		next = match + 1
	}
	cand := rulestore.Version{Domain: domain, Version: next, Body: body}
	if stage != "" { // compiled as the checkers will: the live rules beside it
		cand.Stage = stage
		if cur.Stage == rulestore.StageShadow {
			cand.LiveVersion, cand.LiveBody = cur.LiveVersion, cur.LiveBody
		} else if cur.Version > 0 && !cur.Deleted {
			cand.LiveVersion, cand.LiveBody = cur.Version, cur.Body
		}
	}
	if _, err := a.db.Sources.Candidate(cand); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, errorsOf("invalid rules; nothing was stored", err))
		return "invalid: " + firstLine(err), http.StatusUnprocessableEntity
	}
	v, err := a.db.Store.Put(r.Context(), rulestore.Write{Domain: domain, Body: body, IfMatch: match, Author: authorOf(r), Message: msg, Stage: stage})
	if err != nil {
		return storeError(w, rulestore.Version{Domain: domain}, err)
	}
	if a.db.Apply != nil {
		a.db.Apply(r.Context(), domain)
	}
	action := "put"
	switch {
	case strings.HasSuffix(r.URL.Path, "/rollback"):
		action = "rollback"
	case strings.HasSuffix(r.URL.Path, "/promote"):
		action = "promote"
	case stage != "":
		action = "stage"
	}
	a.audit(r.Context(), action, cur, v)
	w.Header().Set("ETag", etag(v.Version))
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, versionJSON(v, false))
	return fmt.Sprintf("version %d", v.Version), status
}

// deleteDoc ends the domain's rules; without If-Match whatever is current.
func (a *Admin) deleteDoc(w http.ResponseWriter, r *http.Request) (string, int) {
	domain := r.PathValue("domain")
	match, out, status := writeArgs(w, r, rulestore.Any, "message")
	if status != 0 {
		return out, status
	}
	v, err := a.db.Store.Delete(r.Context(), rulestore.Write{Domain: domain, IfMatch: match, Author: authorOf(r), Message: message(r)})
	if err != nil {
		if errors.Is(err, rulestore.ErrNotFound) {
			v.Domain = domain
		}
		return storeError(w, v, err)
	}
	if a.db.Apply != nil {
		a.db.Apply(r.Context(), domain)
	}
	prev, _ := a.db.Store.At(r.Context(), domain, v.Version-1)
	a.audit(r.Context(), "delete", prev, v)
	w.Header().Set("ETag", etag(v.Version))
	writeJSON(w, http.StatusOK, versionJSON(v, false))
	return fmt.Sprintf("deleted at version %d", v.Version), http.StatusOK
}

// rollback writes version ?to= again as the next version (validated as a
// PUT is: the rules around it may have changed since).
func (a *Admin) rollback(w http.ResponseWriter, r *http.Request) (string, int) {
	domain, s := r.PathValue("domain"), r.URL.Query().Get("to")
	match, out, status := writeArgs(w, r, rulestore.Any, "message", "to")
	if status != 0 {
		return out, status
	}
	to, err := strconv.ParseInt(s, 10, 64)
	if err != nil || to < 1 {
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: fmt.Sprintf("to: want the version to go back to (1 or more), got %q", s)})
		return "bad to", http.StatusBadRequest
	}
	old, err := a.db.Store.At(r.Context(), domain, to)
	if err != nil {
		var in *rulestore.InputError
		if errors.As(err, &in) && in.Field == "version" {
			writeJSON(w, http.StatusNotFound, ErrorsJSON{Error: in.Field + ": " + in.Msg})
			return "no such version", http.StatusNotFound
		}
		return storeError(w, rulestore.Version{Domain: domain}, err)
	}
	if old.Deleted {
		writeJSON(w, http.StatusUnprocessableEntity, ErrorsJSON{Error: fmt.Sprintf("version %d of domain %q is a delete: DELETE /v1/rules/%s does that", to, domain, url.PathEscape(domain))})
		return "rollback to a delete", http.StatusUnprocessableEntity
	}
	msg := message(r)
	if msg == "" {
		msg = fmt.Sprintf("rollback to version %d", to)
	}
	return a.write(w, r, domain, old.Body, match, msg, "")
}

// promote makes the staged version current live: its document written
// again as the next version, live.
func (a *Admin) promote(w http.ResponseWriter, r *http.Request) (string, int) {
	domain := r.PathValue("domain")
	match, out, status := writeArgs(w, r, rulestore.Any, "message")
	if status != 0 {
		return out, status
	}
	cur, err := a.db.Store.Get(r.Context(), domain)
	if err != nil {
		if errors.Is(err, rulestore.ErrNotFound) {
			cur.Domain = domain
		}
		return storeError(w, cur, err)
	}
	if cur.Stage != rulestore.StageShadow {
		writeJSON(w, http.StatusConflict, ConflictJSON{Error: fmt.Sprintf("domain %q has no staged version: version %d is live (PUT ?stage=shadow stages one)", domain, cur.Version), Current: cur.Version})
		return "nothing staged", http.StatusConflict
	}
	if match != rulestore.Any && match != cur.Version {
		return storeError(w, cur, &rulestore.ConflictError{Domain: domain, IfMatch: match, Current: cur.Version})
	}
	msg := message(r)
	if msg == "" {
		msg = fmt.Sprintf("promote version %d", cur.Version)
	}
	return a.write(w, r, domain, cur.Body, cur.Version, msg, "")
}

// audit records the change from prev (the version replaced; zero: none)
// to v.
func (a *Admin) audit(ctx context.Context, action string, prev, v rulestore.Version) {
	if a.db.Audit == nil {
		return
	}
	added, removed := linediff.Count(prev.Body, v.Body)
	c := sink.RuleChange{Time: v.Time, Domain: v.Domain, Version: v.Version, From: v.Version - 1, Action: action,
		Author: v.Author, Message: v.Message, Added: added, Removed: removed, Bytes: len(v.Body)}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.db.Audit(ctx, c); err != nil {
		a.logger.Warn("rules change not audited in analytics (it is in the store's history)", "domain", v.Domain,
			"version", v.Version, "error", err)
	}
}

// readBody reads a document of at most the bounds it meets on its way:
// http.max_body_bytes (the listener hands a handler at most one byte more
// and no error: a longer body, chunked, would arrive cut), the rule file
// bound and rules_store.max_document_bytes; status 0: read.
func (a *Admin) readBody(w http.ResponseWriter, r *http.Request) ([]byte, string, int) {
	limit, bound := a.db.MaxDocumentBytes, "rules_store.max_document_bytes"
	if a.maxBody > 0 && a.maxBody < limit {
		limit, bound = a.maxBody, "http.max_body_bytes"
	}
	if config.MaxRuleFileBytes < limit {
		limit, bound = config.MaxRuleFileBytes, "the rule file bound"
	}
	return readLimited(w, r, limit, "rules document above "+bound)
}

// writeArgs reads a write's If-Match (absent: def) and refuses a query
// parameter it does not take; status 0: both fine.
func writeArgs(w http.ResponseWriter, r *http.Request, def int64, params ...string) (match int64, out string, status int) {
	if bad := unknownParams(r, params...); bad != "" {
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: bad})
		return 0, "bad query", http.StatusBadRequest
	}
	match, err := ifMatch(r, def)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorsJSON{Error: err.Error()})
		return 0, "bad If-Match", http.StatusBadRequest
	}
	return match, "", 0
}

// unknownParams names a query parameter a write does not take (a typo
// such as ?stag=shadow must not write live), or "".
func unknownParams(r *http.Request, known ...string) string {
	for k := range r.URL.Query() {
		if !slices.Contains(known, k) {
			return fmt.Sprintf("%s: unknown query parameter (this endpoint takes %s)", k, strings.Join(known, ", "))
		}
	}
	return ""
}
