package config

import (
	"errors"
	"fmt"
	"strings"
)

// The identities velvetrope builds from rules and requests: rule ids,
// counter keys and the descriptor text of analytics. Each is an escaped,
// injective encoding (docs/design.md): distinct inputs never share one.

// AppendCounterKey appends the counter identity of rule for a request's
// entries to buf: the rule ID, then "|" key "=" value for each entry, keys
// and values escaped ([AppendEscaped]; "*"-patterns that share a threshold
// contribute the pattern). The encoding is injective: distinct rules or
// entries never share a key, whatever bytes the values carry. It
// allocates only if buf must grow; reuse buf across calls.
func AppendCounterKey(buf []byte, r *Rule, entries []Entry) []byte {
	buf = append(buf, r.ID...)
	for i, e := range entries {
		buf = append(buf, '|')
		buf = AppendEscaped(buf, e.Key)
		buf = append(buf, '=')
		buf = AppendEscaped(buf, r.CountedValue(i, e.Value))
	}
	return buf
}

// CountedValue is what entry i of value v counts by under r: v, or the
// pattern of a "*" entry that shares one threshold.
func (r *Rule) CountedValue(i int, v string) string {
	if i < len(r.Shared) && r.Shared[i] {
		return r.Path[i].Value
	}
	return v
}

// special reports the bytes [AppendEscaped] escapes: the separators of
// rule ids (':' after the domain, '/' between parts, '=' before a value),
// of counter keys ('|' between entries) and the escape itself.
func special(c byte) bool {
	return c == '\\' || c == '/' || c == ':' || c == '=' || c == '|'
}

// AppendEscaped appends s to buf with a backslash before every '\\', '/',
// ':', '=' and '|', so that a part of a rule id or counter key never
// contains an unescaped separator: splitting at the unescaped separators
// gives back the parts. A string without those bytes is appended as it
// is, in one copy.
func AppendEscaped(buf []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		if special(s[i]) {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', s[i])
			start = i + 1
		}
	}
	return append(buf, s[start:]...)
}

// AppendDescriptorText appends entries as analytics name them,
// "key=value,key=value", with a backslash before every '\\', ',' and '='
// a key or value holds: rows are grouped by this text, so two distinct
// descriptors must never render alike ("a=x,b=y" is one descriptor, and
// `a=x\,b\=y` the other).
func AppendDescriptorText(buf []byte, es []Entry) []byte {
	for i, e := range es {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendTextEscaped(buf, e.Key)
		buf = append(buf, '=')
		buf = appendTextEscaped(buf, e.Value)
	}
	return buf
}

func appendTextEscaped(buf []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == ',' || c == '=' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', c)
			start = i + 1
		}
	}
	return append(buf, s[start:]...)
}

// escaped is s escaped as [AppendEscaped] does, without a copy when
// nothing needs escaping.
func escaped(s string) string {
	for i := 0; i < len(s); i++ {
		if special(s[i]) {
			return string(AppendEscaped(make([]byte, 0, len(s)+8), s))
		}
	}
	return s
}

// InternalRuleID is the id of a rule velvetrope makes itself rather than
// reads from a rule file (a pool's, an operator's deny): the escaped
// domain, ":", kind, ":", the escaped name. No rule file's id has an
// unescaped ':' after its domain's, so these never meet one.
func InternalRuleID(domain, kind, name string) string {
	return escaped(domain) + ":" + kind + ":" + escaped(name)
}

// PoolOf returns the name of the pool whose counter rule id names (the
// [InternalRuleID] of a pool's rule, kind "#pool"), and false for any
// other id: a rule file's, an override's, an operator's deny. Analytics
// tell a pool's usage from a rule's by it, whatever checker wrote the row.
func PoolOf(id string) (name string, ok bool) {
	for i := 0; i < len(id); i++ {
		switch id[i] {
		case '\\':
			i++
		case ':':
			rest, found := strings.CutPrefix(id[i+1:], poolKey+":")
			if !found {
				return "", false
			}
			return unescaped(rest), true
		}
	}
	return "", false
}

// unescaped undoes [AppendEscaped].
func unescaped(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b = append(b, s[i])
	}
	return string(b)
}

// overrideKind is the kind of [OverrideRule]'s ids.
const overrideKind = "override"

// RuleLabel is the label of a rule id in per-rule tallies: the id itself,
// or for an override (whose id carries a per-request limit) its domain's
// escaped name followed by ":override", a label bounded by the rule set.
func RuleLabel(id string) string {
	for i := 0; i < len(id); i++ {
		switch id[i] {
		case '\\':
			i++
		case ':':
			if rest := id[i+1:]; len(rest) > len(overrideKind) && rest[:len(overrideKind)] == overrideKind && rest[len(overrideKind)] == ':' {
				return id[:i+1+len(overrideKind)]
			}
			return id
		}
	}
	return id
}

// MaxDescriptorBytes is the most the entries of one descriptor may take
// in total, as max_entries × (max_key_bytes + max_value_bytes + 2). A
// delta carries them three times over at worst: in its descriptor text
// and its counter key, where each byte may be escaped into two, beside the
// rule id (at most [MaxRuleIDBytes], twice), the domain and the instance
// id. 12 KiB of entries keep the largest delta near 56 KiB, inside the
// pipeline's 64 KiB record bound (events.MaxRecordBytes; the checker's
// test builds that delta).
const MaxDescriptorBytes = 12 << 10

// MaxRuleIDBytes bounds a rule's ID: every delta carries it twice, and a
// delta must stay within the pipeline's record bound.
const MaxRuleIDBytes = 4 << 10

// ParseDescriptorText reads descriptor text, "k=v[,k2=v2...]", as
// AppendDescriptorText writes it (its inverse: every text it writes reads
// back to its entries): a backslash makes the next '\', ',' or '=' part of
// a key or value; a backslash before any other character is itself. A key
// must not be empty; a value may be (a key-only entry). The CLI and the
// admin endpoints read this form; the analytics name keys in it.
func ParseDescriptorText(s string) ([]Entry, error) {
	if s == "" {
		return nil, errors.New("empty descriptor: want k=v[,k2=v2...]")
	}
	var es []Entry
	var field strings.Builder
	var key string
	inValue := false
	entry := func(i int) error {
		switch {
		case !inValue:
			return fmt.Errorf("descriptor %q: entry %d (%q) has no '=': want k=v (a backslash escapes ',' and '=')", s, i, field.String())
		case key == "":
			return fmt.Errorf("descriptor %q: entry %d has an empty key", s, i)
		}
		es = append(es, Entry{Key: key, Value: field.String()})
		field.Reset()
		key, inValue = "", false
		return nil
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s) && (s[i+1] == '\\' || s[i+1] == ',' || s[i+1] == '='):
			field.WriteByte(s[i+1])
			i++
		case c == '=' && !inValue:
			key, inValue = field.String(), true
			field.Reset()
		case c == ',':
			if err := entry(len(es) + 1); err != nil {
				return nil, err
			}
		default:
			field.WriteByte(c)
		}
	}
	if err := entry(len(es) + 1); err != nil {
		return nil, err
	}
	return es, nil
}

// RuleOfCounterKey returns the rule id a counter key begins with: the
// key up to its first unescaped '|' (the whole key when it has none: a
// rule without entries of its own).
func RuleOfCounterKey(key string) string {
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '\\':
			i++
		case '|':
			return key[:i]
		}
	}
	return key
}
