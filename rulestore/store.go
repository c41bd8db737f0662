package rulestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/config"
)

// Version is one stored version of a domain's rules document.
type Version struct {
	// Domain is the rules' domain, as in the document's domain field.
	Domain string `json:"domain"`
	// Version numbers a domain's writes from 1; it only grows, and a
	// delete takes a number too, so a domain written again after a delete
	// goes on from there.
	Version int64 `json:"version"`
	// Body is the document as written (the rule file format, YAML or
	// JSON); empty in a delete's version.
	Body string `json:"body,omitempty"`
	// Deleted marks the version a delete wrote: the domain has no rules.
	Deleted bool `json:"deleted,omitempty"`
	// Stage is "" for a version that is live, or StageShadow for one
	// staged: its document is evaluated beside the live rules and
	// enforces nothing until it is promoted. A staged version carries the
	// live document it leaves in force (LiveBody, version LiveVersion; 0
	// and "" when the domain had no live rules).
	Stage       string `json:"stage,omitempty"`
	LiveVersion int64  `json:"live_version,omitempty"`
	LiveBody    string `json:"live_body,omitempty"`
	// Author is who wrote it (the admin token's name); Message says why.
	Author  string `json:"author,omitempty"`
	Message string `json:"message,omitempty"`
	// Time is when the store took the write, by the writer's clock.
	Time time.Time `json:"time"`
}

// Any is the IfMatch of a write that takes whatever version is current.
const Any int64 = -1

// StageShadow is the Stage of a staged version.
const StageShadow = "shadow"

// StagedSuffix ends the domain a staged version's rules are evaluated
// under ("shop#staged"): a store domain may not end with it.
const StagedSuffix = config.StagedSuffix

// Write is a change to one domain's rules.
type Write struct {
	Domain string
	// Body is the new document (ignored by a delete).
	Body string
	// IfMatch is the version the writer read: the write is refused with a
	// *ConflictError unless it is still current. 0 means the domain was
	// never written; Any takes whatever is current.
	IfMatch int64
	// Author and Message go into the version, for the history and the audit.
	Author, Message string
	// Stage is "" (the body goes live) or StageShadow (the body is staged
	// beside the live rules, which stay in force).
	Stage string
}

// ErrNotFound is returned for a domain that has no rules: never written,
// or deleted (Get then returns the delete's version beside it).
var ErrNotFound = errors.New("rulestore: no rules for this domain")

// ConflictError is a write whose IfMatch was not the current version.
type ConflictError struct {
	Domain           string
	IfMatch, Current int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("rulestore: domain %q is at version %d, the write expected %d", e.Domain, e.Current, e.IfMatch)
}

// InputError is a write or a query the store refuses as given: Field
// names what was wrong.
type InputError struct {
	Field, Msg string
}

func (e *InputError) Error() string { return "rulestore: " + e.Field + ": " + e.Msg }

// Bounds of what one version holds. A rule document of a large fleet is
// tens of KiB; the bound keeps one write from filling the store.
const (
	MaxDomainBytes  = 255
	MaxAuthorBytes  = 256
	MaxMessageBytes = 4096
	// DefaultMaxBodyBytes is the largest document a store takes unless
	// configured otherwise.
	DefaultMaxBodyBytes = 4 << 20
	// DefaultHistory is how many versions of a domain are kept.
	DefaultHistory = 100
	// MaxHistory bounds the history setting.
	MaxHistory = 10000
)

// Options are a store's settings; the zero value is the defaults.
type Options struct {
	// History is how many versions of each domain are kept, the current
	// one included (default DefaultHistory; 1 to MaxHistory).
	History int
	// MaxBodyBytes bounds a document (default DefaultMaxBodyBytes).
	MaxBodyBytes int
	// Now is the clock that stamps versions (default time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() (Options, error) {
	if o.History == 0 {
		o.History = DefaultHistory
	}
	if o.History < 1 || o.History > MaxHistory {
		return o, &InputError{"history", fmt.Sprintf("must be between 1 and %d, got %d", MaxHistory, o.History)}
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxBodyBytes < 0 {
		return o, &InputError{"max_body_bytes", fmt.Sprintf("must be positive, got %d", o.MaxBodyBytes)}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// backend is where versions live. Its calls are the primitives the Store
// builds its rules on; every one is atomic for one domain.
type backend interface {
	// latest returns the domain's newest version; ok is false when the
	// domain was never written.
	latest(ctx context.Context, domain string) (v Version, ok bool, err error)
	// appendIf adds v (whose Version is expected+1) when the domain's
	// current version is expected, keeping the newest keep versions, and
	// announces the change; otherwise it returns the current version and
	// changes nothing.
	appendIf(ctx context.Context, expected int64, v Version, keep int) (current int64, ok bool, err error)
	// history returns up to n versions, newest first.
	history(ctx context.Context, domain string, n int) ([]Version, error)
	// heads returns every domain ever written and its current version.
	heads(ctx context.Context) (map[string]int64, error)
	// changes delivers the domains of writes as they happen, best effort:
	// a slow reader or a lost connection drops some, so a follower also
	// polls heads. The channel closes when ctx ends.
	changes(ctx context.Context) (<-chan string, error)
	close() error
}

// Store keeps every domain's rules documents, versioned. Writes are
// compare-and-set on the version; every version is kept up to the history
// bound. Safe for concurrent use, by one process or many sharing a backend.
type Store struct {
	b    backend
	opts Options
}

func newStore(b backend, opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Store{b: b, opts: o}, nil
}

// Keep is how many versions of a domain the store keeps.
func (s *Store) Keep() int { return s.opts.History }

// Get returns the domain's current version. A domain never written is
// ErrNotFound; a deleted one is ErrNotFound with the delete's version, so
// a writer can create it again with that IfMatch.
func (s *Store) Get(ctx context.Context, domain string) (Version, error) {
	if err := checkDomain(domain); err != nil {
		return Version{}, err
	}
	v, ok, err := s.b.latest(ctx, domain)
	if err != nil {
		return Version{}, fmt.Errorf("rulestore: read domain %q: %w", domain, err)
	}
	if !ok {
		return Version{}, ErrNotFound
	}
	if v.Deleted {
		return v, ErrNotFound
	}
	return v, nil
}

// Put stores w.Body as the domain's next version and returns it.
func (s *Store) Put(ctx context.Context, w Write) (Version, error) {
	if err := s.checkWrite(w); err != nil {
		return Version{}, err
	}
	if len(w.Body) == 0 {
		return Version{}, &InputError{"body", "is empty (a domain without rules is a delete)"}
	}
	if len(w.Body) > s.opts.MaxBodyBytes {
		return Version{}, &InputError{"body", fmt.Sprintf("is %d bytes, more than the store's %d", len(w.Body), s.opts.MaxBodyBytes)}
	}
	if i := invalidUTF8(w.Body); i >= 0 {
		return Version{}, &InputError{"body", "is not UTF-8 text: invalid byte at offset " + strconv.Itoa(i)}
	}
	return s.write(ctx, w, false)
}

// Delete ends the domain's rules with a version of its own (kept in the
// history, so a rollback can bring them back). A domain with no rules is
// ErrNotFound.
func (s *Store) Delete(ctx context.Context, w Write) (Version, error) {
	if err := s.checkWrite(w); err != nil {
		return Version{}, err
	}
	return s.write(ctx, w, true)
}

// write appends the version w describes. With IfMatch Any it takes the
// current version and retries while other writers win the race.
func (s *Store) write(ctx context.Context, w Write, del bool) (Version, error) {
	for {
		expected := w.IfMatch
		var cur Version
		if expected == Any || del || w.Stage != "" {
			var ok bool
			var err error
			cur, ok, err = s.b.latest(ctx, w.Domain)
			if err != nil {
				return Version{}, fmt.Errorf("rulestore: read domain %q: %w", w.Domain, err)
			}
			if del && (!ok || cur.Deleted) {
				return cur, ErrNotFound
			}
			if expected == Any {
				expected = cur.Version
			} else if expected != cur.Version {
				return Version{}, &ConflictError{Domain: w.Domain, IfMatch: w.IfMatch, Current: cur.Version}
			}
		}
		v := Version{Domain: w.Domain, Version: expected + 1, Deleted: del, Author: w.Author, Message: w.Message,
			Time: s.opts.Now().UTC()}
		if !del {
			v.Body = w.Body
		}
		if w.Stage == StageShadow && !del {
			v.Stage = StageShadow
			switch {
			case cur.Stage == StageShadow: // staged again: the same live rules stay
				v.LiveVersion, v.LiveBody = cur.LiveVersion, cur.LiveBody
			case cur.Version > 0 && !cur.Deleted:
				v.LiveVersion, v.LiveBody = cur.Version, cur.Body
			}
		}
		current, ok, err := s.b.appendIf(ctx, expected, v, s.opts.History)
		if err != nil {
			return Version{}, fmt.Errorf("rulestore: write domain %q: %w", w.Domain, err)
		}
		if ok {
			return v, nil
		}
		if w.IfMatch != Any {
			return Version{}, &ConflictError{Domain: w.Domain, IfMatch: w.IfMatch, Current: current}
		}
		if err := ctx.Err(); err != nil {
			return Version{}, err
		}
	}
}

func (s *Store) checkWrite(w Write) error {
	if err := checkDomain(w.Domain); err != nil {
		return err
	}
	if w.IfMatch < Any {
		return &InputError{"if_match", fmt.Sprintf("must be a version (0 or more), got %d", w.IfMatch)}
	}
	if w.Stage != "" && w.Stage != StageShadow {
		return &InputError{"stage", fmt.Sprintf("want %q (or none: live), got %q", StageShadow, w.Stage)}
	}
	if err := checkText("author", w.Author, MaxAuthorBytes); err != nil {
		return err
	}
	return checkText("message", w.Message, MaxMessageBytes)
}

// History returns up to n of the domain's versions, newest first (n ≤ 0:
// all that are kept). A domain never written has none.
func (s *Store) History(ctx context.Context, domain string, n int) ([]Version, error) {
	if err := checkDomain(domain); err != nil {
		return nil, err
	}
	if n <= 0 || n > s.opts.History {
		n = s.opts.History
	}
	vs, err := s.b.history(ctx, domain, n)
	if err != nil {
		return nil, fmt.Errorf("rulestore: read the history of domain %q: %w", domain, err)
	}
	return vs, nil
}

// At returns version n of the domain if the history still holds it.
func (s *Store) At(ctx context.Context, domain string, n int64) (Version, error) {
	vs, err := s.History(ctx, domain, 0)
	if err != nil {
		return Version{}, err
	}
	for _, v := range vs {
		if v.Version == n {
			return v, nil
		}
	}
	if len(vs) > 0 && n > 0 && n < vs[len(vs)-1].Version {
		return Version{}, &InputError{"version", fmt.Sprintf("%d is older than the %d versions kept (oldest %d)", n, len(vs), vs[len(vs)-1].Version)}
	}
	return Version{}, &InputError{"version", fmt.Sprintf("domain %q has no version %d", domain, n)}
}

// Heads returns every domain ever written (deleted ones too) and its
// current version: what a follower polls to see what changed.
func (s *Store) Heads(ctx context.Context) (map[string]int64, error) {
	h, err := s.b.heads(ctx)
	if err != nil {
		return nil, fmt.Errorf("rulestore: read the domains' versions: %w", err)
	}
	return h, nil
}

// Changes delivers the domain of each write soon after it is stored, until
// ctx ends. Best effort: a follower also polls Heads, which nothing
// escapes.
func (s *Store) Changes(ctx context.Context) (<-chan string, error) { return s.b.changes(ctx) }

// Close releases what the store opened (not a Redis client it was given).
func (s *Store) Close() error { return s.b.close() }

func checkDomain(d string) error {
	if strings.HasSuffix(d, StagedSuffix) {
		return &InputError{"domain", fmt.Sprintf("%q ends with %q, which names a domain's staged rules", d, StagedSuffix)}
	}
	switch d {
	case "":
		return &InputError{"domain", "must not be empty"}
	case ".", "..":
		// a path segment of its own: /v1/rules/.. is no domain's address
		return &InputError{"domain", fmt.Sprintf("%q is not a domain name", d)}
	}
	return checkText("domain", d, MaxDomainBytes)
}

// checkText refuses text that is too long, not UTF-8, or holds control
// characters (they would break a log line or a header).
func checkText(field, s string, max int) error {
	if len(s) > max {
		return &InputError{field, fmt.Sprintf("is %d bytes, more than %d", len(s), max)}
	}
	if i := invalidUTF8(s); i >= 0 {
		return &InputError{field, "is not UTF-8: invalid byte at offset " + strconv.Itoa(i)}
	}
	for i, r := range s {
		if r < 0x20 || r == 0x7f {
			return &InputError{field, fmt.Sprintf("holds the control character %U at offset %d", r, i)}
		}
	}
	return nil
}

// invalidUTF8 returns the offset of the first byte that is not UTF-8, or -1.
func invalidUTF8(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}
