package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// parser walks a yaml.Node tree and collects every error with its position.
type parser struct {
	path       string
	src        []byte            // the file, for quoting at most a line of it
	srcLines   []string          // src split, when an error needs it
	firstLines map[string]string // values spanning lines → their first line's part (text)
	errs       ErrorList
}

// errorf records an error at n. Every string argument is text of the file
// (a key, a value) or a list of known words: each is clipped to its first
// line and maxQuoted bytes (a quoted argument is kindName's, already
// clipped), so no message quotes more than the offending line.
func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = p.clip(s)
		}
	}
	e := &Error{File: p.path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *parser) pos(n *yaml.Node) Position { return Position{p.path, n.Line, n.Column} }

// ParseRules parses one rule file's bytes; path names it in errors. A
// fault in the parser (a panic) is returned as an error, never raised.
func ParseRules(path string, data []byte) (f *File, err error) {
	p := &parser{path: path, src: data}
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, ErrorList{&Error{File: path, Msg: fmt.Sprintf("internal error parsing the file: %s (please report it)", clip(fmt.Sprint(r)))}}
		}
	}()
	if len(data) > MaxRuleFileBytes {
		p.errorf(nil, "rule file larger than %d bytes (%d)", MaxRuleFileBytes, len(data))
		return nil, p.errs
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.errs = append(p.errs, yamlError(path, err))
		return nil, p.errs
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.errorf(nil, "empty rule file: want a mapping with domain and descriptors")
		return nil, p.errs
	}
	if g := (&yamlGuard{p: p}); !g.check(&doc) {
		return nil, p.errs
	}
	f = p.file(doc.Content[0])
	return f, p.errs.err()
}

// yamlError turns a YAML syntax error ("yaml: line 3: ...") into a
// positioned Error.
func yamlError(path string, err error) *Error {
	// The library's messages are fixed texts but for an anchor's name;
	// clipped all the same, as every message quoting the file is.
	msg := clip(strings.TrimPrefix(err.Error(), "yaml: "))
	e := &Error{File: path, Msg: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, perr := strconv.Atoi(rest[:i]); perr == nil {
				e.Line, e.Column, e.Msg = n, 1, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return e
}

// fields checks that n is a mapping with unique, known keys and calls fn
// for each key/value pair.
func (p *parser) fields(n *yaml.Node, what string, known []string, fn func(key string, k, v *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s: want a mapping, got %s", what, p.kindName(n))
		return false
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		key := p.text(k)
		if prev, dup := seen[key]; dup {
			p.errorf(k, "%s: duplicate key %q (first at line %d)", what, key, prev.Line)
			continue
		}
		seen[key] = k
		if !slices.Contains(known, key) {
			p.errorf(k, "%s: unknown field %q (known: %s)", what, key, strings.Join(known, ", "))
			continue
		}
		fn(k.Value, k, v)
	}
	return true
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// kindName names what n is for an error message. A scalar is quoted as
// far as it lies on its own line: a file that is not a rule file (read
// whole as one plain scalar folded over all its lines) shows no more than
// the line the error points to.
func (p *parser) kindName(n *yaml.Node) quoted {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		s := p.onLine(n)
		if s == "" && n.Value != "" {
			return "a block of text" // it starts below its indicator: nothing to quote from the line
		}
		return quoted(strconv.Quote(clip(s) + cutMark(len(s) < len(n.Value))))
	}
	return "nothing"
}

// onLine returns the longest prefix of n's value that the source line n
// starts on contains (rounded down to a whole character): all of a value
// written on one line, the first line's part of a folded one.
func (p *parser) onLine(n *yaml.Node) string {
	v := n.Value
	if n.Line < 1 || n.Line > len(p.lines()) {
		return ""
	}
	line := p.lines()[n.Line-1]
	if strings.Contains(line, v) {
		return v
	}
	lo, hi := 0, len(v) // v[:lo] is on the line, v[:hi+1] is not
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if strings.Contains(line, v[:mid]) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	for lo > 0 && !utf8.RuneStart(v[lo]) {
		lo--
	}
	return v[:lo]
}

// lines splits the source into lines, once per file.
func (p *parser) lines() []string {
	if p.srcLines == nil {
		p.srcLines = strings.Split(string(p.src), "\n")
	}
	return p.srcLines
}

func (p *parser) str(n *yaml.Node, field string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, "%s: want a string, got %s", field, p.kindName(n))
		return ""
	}
	return p.text(n)
}

// text returns a scalar's value as the rules use it. A value that does
// not fit on the line it starts on (folded over lines, a block) is
// remembered with the part that does, and errors quote that part only
// (clip): no message shows another line of the file.
func (p *parser) text(n *yaml.Node) string {
	v := n.Value
	if on := p.onLine(n); on != v && v != "" {
		if p.firstLines == nil {
			p.firstLines = map[string]string{}
		}
		p.firstLines[v] = on
	}
	return v
}

// clip is the package's clip for text of this file: a value that spans
// lines is cut where its first line ends.
func (p *parser) clip(s string) string {
	on, spans := p.firstLines[s]
	if !spans {
		return clip(s)
	}
	c := clip(on)
	if len(c) == len(on) { // clip cut nothing: mark the lines left out
		c += cutMark(true)
	}
	return c
}

// quote is clip, Go-quoted.
func (p *parser) quote(s string) string { return strconv.Quote(p.clip(s)) }

func (p *parser) boolean(n *yaml.Node, field string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errorf(n, "%s: want true or false, got %s", field, p.kindName(n))
	}
	return b
}

// integerOK is integer, and whether n was one (its error then reported).
func (p *parser) integerOK(n *yaml.Node, field string) (int64, bool) {
	before := len(p.errs)
	v := p.integer(n, field)
	return v, len(p.errs) == before
}

func (p *parser) integer(n *yaml.Node, field string) int64 {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, "%s: want an integer, got %s", field, p.kindName(n))
		return 0
	}
	return v
}

var fileFields = []string{"domain", "pools", "descriptors"}

func (p *parser) file(n *yaml.Node) *File {
	f := &File{Path: p.path, Pos: p.pos(n)}
	if !p.ruleShaped(resolve(n)) {
		return f
	}
	var domainNode *yaml.Node
	p.fields(n, "rule file", fileFields, func(key string, _, v *yaml.Node) {
		switch key {
		case "domain":
			domainNode, f.Domain = v, p.str(v, "domain")
		case "pools":
			f.Pools = p.pools(v)
		case "descriptors":
			f.Descriptors = p.descriptors(v, "descriptors")
		}
	})
	p.checkPools(f, f.Descriptors)
	if domainNode == nil && n.Kind == yaml.MappingNode {
		p.errorf(n, "rule file: missing domain")
	} else if domainNode != nil && f.Domain == "" {
		p.errorf(domainNode, "domain: must not be empty")
	}
	return f
}

var descriptorFields = []string{"key", "value", "rate_limit", "shadow_mode", "detailed_metric", "hash_values",
	"share_threshold", "value_to_metric", "descriptors", "algorithm", "burst", "throttle", "on_exceed", "mode", "near_limit",
	"failure", "shards", "defer", "plans", "limits", "concurrency", "rlqs"}

func (p *parser) descriptors(n *yaml.Node, where string) []*Descriptor {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s: want a list, got %s", where, p.kindName(n))
		return nil
	}
	out := make([]*Descriptor, 0, len(n.Content))
	seen := map[[2]string]*Descriptor{}
	for _, item := range n.Content {
		d := p.descriptor(resolve(item))
		if d == nil {
			continue
		}
		id := [2]string{d.Key, d.Value}
		if prev, dup := seen[id]; dup {
			what := "key " + p.quote(d.Key)
			if d.Value != "" {
				what += " with value " + p.quote(d.Value)
			}
			p.errorf(item, "duplicate descriptor: %s is already defined at line %d", what, prev.Pos.Line)
			continue
		}
		seen[id] = d
		out = append(out, d)
	}
	return out
}

func (p *parser) descriptor(n *yaml.Node) *Descriptor {
	d := &Descriptor{Pos: p.pos(n)}
	hasKey := false
	ok := p.fields(n, "descriptor", descriptorFields, func(key string, _, v *yaml.Node) {
		switch key {
		case "key":
			d.Key, hasKey = p.str(v, "key"), true
		case "value":
			d.Value = p.str(v, "value")
		case "rate_limit":
			d.RateLimit = p.rateLimit(v)
		case "shadow_mode":
			d.ShadowMode = p.boolean(v, "shadow_mode")
		case "detailed_metric":
			d.DetailedMetric = p.boolean(v, "detailed_metric")
		case "share_threshold":
			d.ShareThreshold = p.boolean(v, "share_threshold")
		case "hash_values":
			d.HashValues = p.boolean(v, "hash_values")
		case "value_to_metric": // Envoy's metrics option; accepted, metrics carry values anyway
			p.boolean(v, "value_to_metric")
		case "descriptors":
			d.Descriptors = p.descriptors(v, "descriptors")
		case "algorithm":
			d.Algorithm = Algorithm(p.enum(v, "algorithm", algorithms))
		case "burst":
			if d.Burst = p.integer(v, "burst"); d.Burst <= 0 {
				p.errorf(v, "burst: must be > 0, got %s", v.Value)
			}
		case "throttle":
			p.throttle(v, &d.Throttle)
		case "on_exceed":
			d.OnExceed = OnExceed(p.enum(v, "on_exceed", []string{string(ExceedDeny), string(ExceedDefer)}))
		case "mode":
			d.Mode = Mode(p.enum(v, "mode", []string{string(ModeAsync), string(ModeSync), string(ModeLocal)}))
		case "near_limit":
			d.NearLimit = NearLimit(p.enum(v, "near_limit", []string{string(NearSync), string(NearAsync)}))
		case "failure":
			d.Failure = FailurePolicy(p.enum(v, "failure", []string{string(FailOpen), string(FailClosed), string(FailLocalBudget)}))
		case "shards":
			if d.Shards = p.integer(v, "shards"); d.Shards < 1 || d.Shards > MaxShards {
				p.errorf(v, "shards: must be between 1 and %d, got %s", MaxShards, v.Value)
			}
		case "defer":
			d.Defer = p.deferSpec(v)
		case "plans":
			d.Plans = p.plansSpec(v)
		case "limits":
			d.Limits = p.limits(v)
		case "concurrency":
			d.Concurrency = p.concurrencySpec(v)
		case "rlqs":
			d.RLQS = p.rlqsSpec(v)
		}
	})
	if !ok {
		return nil
	}
	if !hasKey || d.Key == "" {
		p.errorf(n, "descriptor: missing key")
	}
	p.checkLimits(n, d)
	if d.Limits != nil && d.RateLimit == nil && len(d.Limits) > 0 {
		d.RateLimit = &RateLimit{Unit: d.Limits[0].Unit, RequestsPerUnit: d.Limits[0].RequestsPerUnit} // the first limit is the rule
	}
	if d.Concurrency != nil {
		p.checkConcurrency(n, d)
		d.RateLimit = concurrencyRateLimit(d.Concurrency)
		return d
	}
	p.checkDescriptor(n, d)
	return d
}

// MaxShards bounds the shards extension.
const MaxShards = 64

// algorithms are the names an `algorithm:` field accepts: [Algorithms]
// but Envoy's semantics and concurrency, which are written otherwise.
var algorithms = func() []string {
	var names []string
	for _, a := range Algorithms() {
		if a != AlgEnvoy && a != AlgConcurrency { // written as no algorithm, and as a concurrency block
			names = append(names, string(a))
		}
	}
	return names
}()

func (p *parser) enum(n *yaml.Node, field string, allowed []string) string {
	s := p.str(n, field)
	if s != "" && !slices.Contains(allowed, s) {
		p.errorf(n, "%s: unknown value %q (want one of %s)", field, s, strings.Join(allowed, ", "))
		return ""
	}
	return s
}

func (p *parser) rateLimit(n *yaml.Node) *RateLimit {
	rl := &RateLimit{}
	var unitNode, rpuNode *yaml.Node
	p.fields(n, "rate_limit", []string{"unit", "requests_per_unit", "unlimited", "name", "replaces"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "unit":
			unitNode = v
			s := strings.ToLower(p.str(v, "unit"))
			if u, ok := unitNames[s]; ok {
				rl.Unit = u
			} else if s != "" {
				p.errorf(v, "unit: unknown unit %q (want second, minute, hour, day, week, month or year)", v.Value)
			}
		case "requests_per_unit":
			rpuNode, rl.RequestsPerUnit = v, p.integer(v, "requests_per_unit")
		case "unlimited":
			rl.Unlimited = p.boolean(v, "unlimited")
		case "name":
			rl.Name = p.str(v, "name")
		case "replaces":
			rl.Replaces = p.replaces(v)
		}
	})
	if n.Kind != yaml.MappingNode {
		return nil
	}
	switch {
	case rl.Unlimited && unitNode != nil:
		p.errorf(unitNode, "rate_limit: unit must not be set when unlimited is true")
	case rl.Unlimited && rpuNode != nil:
		p.errorf(rpuNode, "rate_limit: requests_per_unit must not be set when unlimited is true")
	case rl.Unlimited:
	case unitNode == nil:
		p.errorf(n, "rate_limit: missing unit")
	case rpuNode == nil:
		p.errorf(n, "rate_limit: missing requests_per_unit")
	case rl.RequestsPerUnit < 0:
		p.errorf(rpuNode, "requests_per_unit: must not be negative, got %s", rpuNode.Value)
	}
	for _, r := range rl.Replaces {
		if r == rl.Name {
			p.errorf(n, "rate_limit: replaces must not name the rate limit itself (%q)", r)
		}
	}
	return rl
}

func (p *parser) replaces(n *yaml.Node) []string {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "replaces: want a list of {name: ...}, got %s", p.kindName(n))
		return nil
	}
	var names []string
	for _, item := range n.Content {
		name := ""
		p.fields(item, "replaces", []string{"name"}, func(_ string, _, v *yaml.Node) { name = p.str(v, "name") })
		if name == "" {
			p.errorf(item, "replaces: missing name")
			continue
		}
		names = append(names, name)
	}
	return names
}

// checkDescriptor reports extensions that contradict each other.
func (p *parser) checkDescriptor(n *yaml.Node, d *Descriptor) {
	p.checkPlans(n, d)
	ext := d.Algorithm != "" || d.Burst != 0 || d.Throttle.Type != "" || d.OnExceed != "" || d.Mode != "" ||
		d.NearLimit != "" || d.Failure != "" || d.Shards != 0 || d.Defer != nil
	if d.RateLimit == nil {
		if ext {
			p.errorf(n, "descriptor %q: limit extensions (algorithm, burst, throttle, ...) need a rate_limit", d.Key)
		}
		if d.ShadowMode {
			p.errorf(n, "descriptor %q: shadow_mode needs a rate_limit", d.Key)
		}
		return
	}
	if d.RateLimit.Unlimited && ext {
		p.errorf(n, "descriptor %q: an unlimited rate_limit takes no limit extensions", d.Key)
		return
	}
	mode := d.Mode
	if mode == "" {
		mode = ModeAsync
	}
	if d.RateLimit.RequestsPerUnit == 0 && !d.RateLimit.Unlimited && ext {
		p.errorf(n, "descriptor %q: requests_per_unit 0 (refuse everything, as in Envoy) takes no limit extensions; set a limit > 0", d.Key)
		return
	}
	switch {
	case d.Algorithm == AlgSlidingLog && mode == ModeAsync:
		p.errorf(n, "descriptor %q: algorithm sliding_log needs mode sync or local (async counters cannot keep a log)", d.Key)
	case d.Algorithm == AlgSlidingLog && d.RateLimit.RequestsPerUnit > 1<<20:
		p.errorf(n, "descriptor %q: sliding_log keeps one entry per request: requests_per_unit must be at most 1048576", d.Key)
	}
	if d.Burst != 0 && !d.Algorithm.Bucket() {
		p.errorf(n, "descriptor %q: burst needs algorithm token_bucket, gcra or leaky_bucket", d.Key)
	}
	if d.NearLimit != "" && mode != ModeAsync {
		p.errorf(n, "descriptor %q: near_limit applies to mode async only", d.Key)
	}
	if d.Shards != 0 && mode == ModeLocal {
		p.errorf(n, "descriptor %q: shards apply to shared counters, not mode local", d.Key)
	}
	if d.Shards > 1 && mode == ModeSync {
		p.errorf(n, "descriptor %q: shards apply to mode async (a sync decision is one atomic script on one key)", d.Key)
	}
	if d.Shards > 1 && (d.Algorithm.Bucket() || d.Algorithm == AlgSlidingLog) {
		p.errorf(n, "descriptor %q: shards need a window algorithm (none, fixed_window or sliding_window): a bucket's state cannot be summed", d.Key)
	}
	if d.Failure != "" && mode == ModeLocal {
		p.errorf(n, "descriptor %q: failure policies apply to shared counters, not mode local", d.Key)
	}
	if d.OnExceed == ExceedDefer && d.ShadowMode {
		p.errorf(n, "descriptor %q: on_exceed defer and shadow_mode contradict (shadow never refuses)", d.Key)
	}
	switch {
	case d.Defer != nil && d.OnExceed != ExceedDefer:
		p.errorf(n, "descriptor %q: a defer block needs on_exceed: defer", d.Key)
	case d.OnExceed == ExceedDefer && d.Algorithm == "":
		p.errorf(n, "descriptor %q: on_exceed defer needs an explicit algorithm (with Envoy's semantics a refused call is charged, so a deferred one would be charged twice)", d.Key)
	case d.OnExceed == ExceedDefer && (d.Defer == nil || d.Defer.Target == ""):
		p.errorf(n, "descriptor %q: on_exceed defer needs defer.target, the URL the drain delivers deferred requests to", d.Key)
	}
	if d.Throttle.Type == ThrottleElastic {
		switch {
		case d.Algorithm != AlgFixedWindow && d.Algorithm != AlgSlidingWindow:
			p.errorf(n, "descriptor %q: elastic throttling needs algorithm fixed_window or sliding_window (a pool is a window's capacity)", d.Key)
		case mode != ModeAsync:
			p.errorf(n, "descriptor %q: elastic throttling needs mode async (the pool is a shared counter)", d.Key)
		case d.Shards > 1:
			p.errorf(n, "descriptor %q: elastic throttling and shards do not combine", d.Key)
		case d.OnExceed == ExceedDefer:
			p.errorf(n, "descriptor %q: elastic throttling and on_exceed defer do not combine: borrow or defer", d.Key)
		case d.ShadowMode:
			p.errorf(n, "descriptor %q: elastic throttling and shadow_mode do not combine (a shadow rule refuses nothing, so it never borrows)", d.Key)
		}
	}
	if err := CheckRequestsPerUnit(d.Throttle.Type, d.RateLimit.RequestsPerUnit); err != nil && d.RateLimit.RequestsPerUnit > 0 {
		p.errorf(n, "descriptor %q: requests_per_unit: %v", d.Key, err)
	}
}

// ReadRuleFiles parses each path: a file, or a directory whose *.yaml and
// *.yml files (recursively, in lexical order) are read. Only regular files
// are read, and within a directory a symbolic link is followed only while
// it stays inside it (files.go): anything else is an error naming the
// file.
func ReadRuleFiles(paths ...string) ([]*File, error) {
	var errs ErrorList
	var files []*File
	for _, root := range paths {
		dir, err := openRuleDir(root)
		if err != nil {
			errs = append(errs, &Error{File: root, Msg: pathErrorMsg(root, err)})
			continue
		}
		for _, rf := range dir.files {
			data, err := dir.read(rf)
			if err != nil {
				errs = append(errs, &Error{File: rf.name, Msg: pathErrorMsg(rf.name, err)})
				continue
			}
			f, err := ParseRules(rf.name, data)
			if err != nil {
				errs = append(errs, err.(ErrorList)...)
				continue
			}
			files = append(files, f)
		}
		dir.Close()
	}
	return files, errs.err()
}

// ruleShaped reports whether a file's top level is a rule file's at all:
// a mapping with one of domain, pools, descriptors. Any other mapping (a
// file that is not a rule file: credentials, a password file whose every
// line is a key) is one error that quotes none of its keys, where an
// unknown-field error per key would list the whole file.
func (p *parser) ruleShaped(n *yaml.Node) bool {
	if n.Kind != yaml.MappingNode {
		return true // fields reports what it is instead
	}
	for i := 0; i < len(n.Content); i += 2 {
		if slices.Contains(fileFields, n.Content[i].Value) {
			return true
		}
	}
	p.errorf(n, "not a rule file: its top level has %d keys and none is domain, pools or descriptors", len(n.Content)/2)
	return false
}
