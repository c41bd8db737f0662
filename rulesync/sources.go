package rulesync

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/rulestore"
)

// Sources compiles the live rule set from its places — rule files, the
// rules store's documents and an xDS control plane's configurations — and
// swaps it into a config.Store. A
// change from either place is compiled with the other's current rules
// before it goes live; a change that does not compile is refused and the
// rules before it stay. Safe for concurrent use.
type Sources struct {
	live *config.Store

	mu    sync.Mutex
	files []*config.File
	docs  map[string]doc // by domain: the store's versions that are live
	xds   []*config.File // the xDS control plane's configurations that are live
}

// doc is a store version that compiled, with its parsed documents: the
// live one (nil for a staged version of a domain with no live rules) and
// a staged version's, under the staged domain.
type doc struct {
	v      rulestore.Version
	file   *config.File
	staged *config.File
}

// NewSources returns Sources feeding live, starting from the rule files
// already parsed (those live's set was compiled from) and no store
// documents.
func NewSources(live *config.Store, files []*config.File) *Sources {
	return &Sources{live: live, files: files, docs: map[string]doc{}}
}

// DocPath is how errors and the rule set name a store document: errors
// read "store:api@3:4:7: ...", line and column within version 3 of
// domain api.
func DocPath(domain string, version int64) string {
	return fmt.Sprintf("store:%s@%d", domain, version)
}

// Parse reads a store version's document as a rule file, refusing one
// whose domain is not the version's.
func Parse(v rulestore.Version) (*config.File, error) {
	path := DocPath(v.Domain, v.Version)
	f, err := config.ParseRules(path, []byte(v.Body))
	if err != nil {
		return nil, err
	}
	if f.Domain != v.Domain {
		return nil, config.ErrorList{&config.Error{File: path, Line: f.Pos.Line, Column: f.Pos.Column,
			Msg: fmt.Sprintf("the document's domain %q is not the domain it is stored under, %q", f.Domain, v.Domain)}}
	}
	return f, nil
}

// parseDoc reads a version's documents: a live version's, or a staged
// version's two (the live rules it leaves in force, and its own under
// the staged domain, where it can refuse but never defer: its answers
// are thrown away, so work queued by it would be done for nobody).
func parseDoc(v rulestore.Version) (doc, error) {
	if v.Stage != rulestore.StageShadow {
		f, err := Parse(v)
		return doc{v: v, file: f}, err
	}
	d := doc{v: v}
	if v.LiveVersion > 0 {
		f, err := Parse(rulestore.Version{Domain: v.Domain, Version: v.LiveVersion, Body: v.LiveBody})
		if err != nil {
			return doc{}, err
		}
		d.file = f
	}
	f, err := Parse(v)
	if err != nil {
		return doc{}, err
	}
	f.Domain += rulestore.StagedSuffix
	f.Path += " (staged)"
	f.Staged = true
	stripDefer(f.Descriptors)
	d.staged = f
	return d, nil
}

func stripDefer(ds []*config.Descriptor) {
	for _, d := range ds {
		if d.OnExceed == config.ExceedDefer {
			d.OnExceed, d.Defer = config.ExceedDeny, nil
		}
		stripDefer(d.Descriptors)
	}
}

// SetFiles makes files the rule files' part of the set.
func (s *Sources) SetFiles(files []*config.File) (*config.RuleSet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, err := compile(files, s.docs, s.xds)
	if err != nil {
		return nil, err
	}
	s.files = files
	s.live.Swap(rs)
	return rs, nil
}

// Candidate compiles the set v would make (a delete's version takes the
// domain out) without making it live: what a write is validated with.
func (s *Sources) Candidate(v rulestore.Version) (*config.RuleSet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, _, err := s.candidate(v)
	return rs, err
}

// Apply makes v the domain's live version, or takes the domain out when
// v is a delete's. A version that does not compile is refused with why,
// and the domain's rules before it stay.
func (s *Sources) Apply(v rulestore.Version) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.docs[v.Domain]; ok && cur.v.Version == v.Version {
		return nil
	}
	rs, d, err := s.candidate(v)
	if err != nil {
		return err
	}
	if v.Deleted {
		delete(s.docs, v.Domain)
	} else {
		s.docs[v.Domain] = d
	}
	s.live.Swap(rs)
	return nil
}

func (s *Sources) candidate(v rulestore.Version) (*config.RuleSet, doc, error) {
	docs := make(map[string]doc, len(s.docs)+1)
	for k, d := range s.docs {
		docs[k] = d
	}
	var d doc
	if v.Deleted {
		delete(docs, v.Domain)
	} else {
		var err error
		if d, err = parseDoc(v); err != nil {
			return nil, doc{}, err
		}
		docs[v.Domain] = d
	}
	rs, err := compile(s.files, docs, s.xds)
	return rs, d, err
}

// SetXDS makes files the xDS control plane's part of the set (all of it:
// a state-of-the-world update replaces the one before). A set that does
// not compile with the rest is refused and the one before stays.
func (s *Sources) SetXDS(files []*config.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, err := compile(s.files, s.docs, files)
	if err != nil {
		return err
	}
	s.xds = files
	s.live.Swap(rs)
	return nil
}

// Live returns the store versions that are live, by domain.
func (s *Sources) Live() map[string]rulestore.Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]rulestore.Version, len(s.docs))
	for k, d := range s.docs {
		out[k] = d.v
	}
	return out
}

// FileDomain returns the rule file that defines domain, if one does: a
// domain lives in files or in the store, never both.
func (s *Sources) FileDomain(domain string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		if f.Domain == domain {
			return f.Path, true
		}
	}
	return "", false
}

// compile builds the set of files and docs (docs in domain order, so
// errors come out the same way every time). A fault in the compiler is an
// error, never a crash.
func compile(files []*config.File, docs map[string]doc, xds []*config.File) (rs *config.RuleSet, err error) {
	defer func() {
		if p := recover(); p != nil {
			rs, err = nil, fmt.Errorf("rulesync: internal error compiling the rules: %v (please report it)", p)
		}
	}()
	all := append([]*config.File(nil), files...)
	names := make([]string, 0, len(docs))
	for k := range docs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if f := docs[k].file; f != nil {
			all = append(all, f)
		}
		if f := docs[k].staged; f != nil {
			all = append(all, f)
		}
	}
	all = append(all, xds...)
	rs, err = config.Compile(all)
	if err != nil {
		var el config.ErrorList
		if errors.As(err, &el) {
			return nil, el
		}
		return nil, err
	}
	return rs, nil
}
