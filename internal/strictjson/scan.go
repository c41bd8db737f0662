package strictjson

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxDepth bounds nesting. The bodies read here are a few levels deep;
// only an any-value can nest further, and the scan recurses.
const maxDepth = 64

// scanner walks one body against a schema. It allocates only to report
// an error, or to unescape a field name that has escapes.
type scanner struct {
	data  []byte
	pos   int
	depth int
	key   []byte // scratch: an escaped field name, unescaped
}

// scanError is what the scan found wrong: segs is the path to the value,
// innermost first (parents append their part on the way out); syntax
// errors are about the body, not a field.
type scanError struct {
	segs   []string
	msg    string
	syntax bool
}

func (e *scanError) in(seg string) *scanError {
	if !e.syntax {
		e.segs = append(e.segs, seg)
	}
	return e
}

// toError names the field: descriptors[0].entries[3].key.
func (e *scanError) toError() *Error {
	if e.syntax || len(e.segs) == 0 {
		return &Error{Status: 400, Field: "body", Msg: e.msg}
	}
	var b strings.Builder
	for i := len(e.segs) - 1; i >= 0; i-- {
		s := e.segs[i]
		if b.Len() > 0 && s[0] != '[' {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return &Error{Status: 400, Field: b.String(), Msg: e.msg}
}

func (s *scanner) syntax(format string, args ...any) *scanError {
	return &scanError{msg: fmt.Sprintf("malformed JSON at byte %d: ", s.pos) + fmt.Sprintf(format, args...), syntax: true}
}

func failf(format string, args ...any) *scanError {
	return &scanError{msg: fmt.Sprintf(format, args...)}
}

// quote shows a client's text in a message: quoted, at most 64 bytes.
func quote(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + "..."
	}
	return strconv.Quote(string(b))
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value scans one value of shape n.
func (s *scanner) value(n *node) *scanError {
	if s.pos >= len(s.data) {
		return s.syntax("unexpected end of the body")
	}
	c := s.data[s.pos]
	var got string
	switch {
	case c == 'n':
		return s.literal("null")
	case c == '{':
		switch n.kind {
		case kObject:
			return s.object(n)
		case kMap:
			return s.anyObject(n.elem)
		case kAny:
			return s.anyObject(n)
		}
		got = "an object"
	case c == '[':
		switch n.kind {
		case kArray:
			return s.array(n, n.elem)
		case kAny:
			return s.array(n, n)
		}
		got = "an array"
	case c == '"':
		switch n.kind {
		case kString, kAny, kPBNumber, kPBEnum:
			return s.str(n, nil)
		}
		got = "a string"
	case c == 't' || c == 'f':
		if n.kind == kBool || n.kind == kAny {
			if c == 't' {
				return s.literal("true")
			}
			return s.literal("false")
		}
		got = "a boolean"
	case c == '-' || c >= '0' && c <= '9':
		switch n.kind {
		case kInt, kUint, kFloat, kPBNumber, kPBEnum, kAny:
			return s.number(n)
		}
		got = "a number"
	default:
		return s.syntax("unexpected %q", c)
	}
	return failf("want %s, got %s", kindNames[n.kind], got)
}

func (s *scanner) literal(lit string) *scanError {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return s.syntax("want %s", lit)
	}
	s.pos += len(lit)
	return nil
}

func (s *scanner) enter() *scanError {
	if s.depth++; s.depth > maxDepth {
		return &scanError{msg: fmt.Sprintf("nested deeper than %d levels at byte %d", maxDepth, s.pos), syntax: true}
	}
	return nil
}

// object scans an object of n's fields: each name exactly one of them,
// none twice.
func (s *scanner) object(n *node) *scanError {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // {
	var seen uint64
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		name, err := s.name()
		if err != nil {
			return err
		}
		var f *field
		for i := range n.fields {
			if string(name) == n.fields[i].name {
				f = &n.fields[i]
				break
			}
		}
		if f == nil {
			return unknown(name, n)
		}
		if seen&(1<<f.index) != 0 {
			msg := "duplicate field"
			for _, g := range n.fields {
				if g.index == f.index && g.name != f.name {
					msg += fmt.Sprintf(" (a field of two names, %s and %s: give one, once)", g.name, f.name)
				}
			}
			return failf("%s", msg).in(f.name)
		}
		seen |= 1 << f.index
		if err := s.value(f.node); err != nil {
			return err.in(f.canon)
		}
		if done, err := s.next('}'); err != nil || done {
			s.depth--
			return err
		}
	}
}

// unknown is the error of a name n has no field for, with the field it
// differs from only in case when there is one.
func unknown(name []byte, n *node) *scanError {
	msg := "unknown field"
	for _, f := range n.fields {
		if strings.EqualFold(string(name), f.name) {
			msg += fmt.Sprintf(" (names are case-sensitive: the field is %q)", f.name)
			break
		}
	}
	return failf("%s", msg).in(quoteSeg(name))
}

// anyObject scans an object of any names, none twice, each value of
// shape elem.
func (s *scanner) anyObject(elem *node) *scanError {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // {
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		s.depth--
		return nil
	}
	// the names seen: a slice while few (no map for the usual handful of
	// headers), a set beyond, so that many names cost linear time
	var few []string
	var many map[string]struct{}
	for {
		name, err := s.name()
		if err != nil {
			return err
		}
		dup := false
		if many != nil {
			_, dup = many[string(name)]
		} else {
			for _, k := range few {
				dup = dup || k == string(name)
			}
		}
		if dup {
			return failf("duplicate field").in(quoteSeg(name))
		}
		if many == nil && len(few) < 16 {
			few = append(few, string(name))
		} else {
			if many == nil {
				many = make(map[string]struct{}, 64)
				for _, k := range few {
					many[k] = struct{}{}
				}
			}
			many[string(name)] = struct{}{}
		}
		if err := s.value(elem); err != nil {
			return err.in(quoteSeg(name))
		}
		if done, err := s.next('}'); err != nil || done {
			s.depth--
			return err
		}
	}
}

// quoteSeg is a client's name as a path segment: as it is when it reads
// as one, quoted otherwise (an empty name, a dot, a quote, 65 bytes...).
func quoteSeg(name []byte) string {
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return quote(name)
		}
	}
	if len(name) == 0 || len(name) > 64 {
		return quote(name)
	}
	return string(name)
}

// plainString is the shape of a field name: any string.
var plainString = &node{kind: kString}

// name scans a field name and the colon after it; the name aliases the
// body unless it has escapes.
func (s *scanner) name() ([]byte, *scanError) {
	s.ws()
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, s.syntax("want a field name")
	}
	start := s.pos + 1
	i := start
	for i < len(s.data) {
		c := s.data[i]
		if c == '"' {
			break
		}
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			i = -1 // the slow way: escapes, UTF-8, or an error to report
			break
		}
		i++
	}
	var name []byte
	if i >= start && i < len(s.data) {
		name = s.data[start:i]
		s.pos = i + 1
	} else {
		s.key = s.key[:0]
		if err := s.str(plainString, &s.key); err != nil {
			if !err.syntax {
				err.msg = "a field name: " + err.msg
			}
			return nil, err
		}
		name = s.key
	}
	s.ws()
	if s.pos >= len(s.data) || s.data[s.pos] != ':' {
		return nil, s.syntax("want ':' after a field name")
	}
	s.pos++
	s.ws()
	return name, nil
}

// next scans what follows a member or element: a comma (done false) or
// the closing bracket (done true).
func (s *scanner) next(closing byte) (bool, *scanError) {
	s.ws()
	if s.pos >= len(s.data) {
		return false, s.syntax("unexpected end of the body")
	}
	switch s.data[s.pos] {
	case ',':
		s.pos++
		s.ws()
		return false, nil
	case closing:
		s.pos++
		return true, nil
	}
	return false, s.syntax("want ',' or %q", closing)
}

// array scans an array of n's bound, each element of shape elem; it stops
// at the first element past the bound.
func (s *scanner) array(n, elem *node) *scanError {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // [
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for i := 0; ; i++ {
		if n.max > 0 && i == n.max {
			return failf("more than %d %s", n.max, n.what)
		}
		if err := s.value(elem); err != nil {
			return err.in("[" + strconv.Itoa(i) + "]")
		}
		if done, err := s.next(']'); err != nil || done {
			s.depth--
			return err
		}
	}
}

// str scans a string of n's bound (in decoded bytes), refusing bytes that
// are not UTF-8 and escapes of lone surrogates; with out, it appends the
// decoded string there.
func (s *scanner) str(n *node, out *[]byte) *scanError {
	d := s.data
	i := s.pos + 1
	size := 0 // decoded bytes so far
	for {
		start := i
		for i < len(d) {
			if c := d[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				break
			}
			i++
		}
		size += i - start
		if out != nil {
			*out = append(*out, d[start:i]...)
		}
		if n.max > 0 && size > n.max {
			return failf("longer than %d %s", n.max, n.what)
		}
		if i >= len(d) {
			s.pos = i
			return s.syntax("unterminated string")
		}
		c := d[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return nil
		case c == '\\':
			r, w, err := s.escape(i)
			if err != nil {
				return err
			}
			i += w
			size += utf8.RuneLen(r)
			if out != nil {
				*out = utf8.AppendRune(*out, r)
			}
		case c < 0x20:
			s.pos = i
			return s.syntax("control character %#02x in a string", c)
		default:
			r, w := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && w <= 1 {
				return failf("not valid UTF-8 (byte %#02x at offset %d)", c, i)
			}
			if out != nil {
				*out = append(*out, d[i:i+w]...)
			}
			i += w
			size += w
		}
	}
}

// escape reads the escape at d[i] ('\\'): the rune it stands for and its
// width in the body. A \u escape of a UTF-16 surrogate must be a high one
// followed by a low one; alone, it is no character (encoding/json makes
// it U+FFFD).
func (s *scanner) escape(i int) (rune, int, *scanError) {
	d := s.data
	if i+1 >= len(d) {
		s.pos = i
		return 0, 0, s.syntax("unterminated string")
	}
	switch d[i+1] {
	case '"', '\\', '/':
		return rune(d[i+1]), 2, nil
	case 'b':
		return '\b', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'n':
		return '\n', 2, nil
	case 'r':
		return '\r', 2, nil
	case 't':
		return '\t', 2, nil
	case 'u':
		r, ok := hex4(d[i+2:])
		if !ok {
			s.pos = i
			return 0, 0, s.syntax("bad \\u escape")
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+12 <= len(d) && d[i+6] == '\\' && d[i+7] == 'u' {
				if lo, ok := hex4(d[i+8:]); ok && lo >= 0xDC00 && lo < 0xE000 {
					return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12, nil
				}
			}
			return 0, 0, failf("a lone UTF-16 surrogate (\\u%04x) is not a character", r)
		case r >= 0xDC00 && r < 0xE000:
			return 0, 0, failf("a lone UTF-16 surrogate (\\u%04x) is not a character", r)
		}
		return r, 6, nil
	}
	s.pos = i
	return 0, 0, s.syntax("bad escape \\%c", d[i+1])
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number scans a number (JSON's grammar); an integer field takes only an
// integer literal in its type's range.
func (s *scanner) number(n *node) *scanError {
	d := s.data
	start, i := s.pos, s.pos
	neg := d[i] == '-'
	if neg {
		i++
	}
	digits := func() int {
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i - j
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case digits() == 0:
		s.pos = i
		return s.syntax("want a digit")
	}
	intEnd := i
	if i < len(d) && d[i] == '.' {
		i++
		if digits() == 0 {
			s.pos = i
			return s.syntax("want a digit after '.'")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			s.pos = i
			return s.syntax("want a digit in the exponent")
		}
	}
	s.pos = i
	if n.kind != kInt && n.kind != kUint {
		return nil
	}
	lit := d[start:i]
	if i != intEnd || n.kind == kUint && neg {
		return failf("want %s, got %s", kindNames[n.kind], quoteNum(lit))
	}
	var v uint64
	limit := uint64(1)<<(n.bits-1) - 1 // the largest int
	switch {
	case n.kind == kUint:
		limit = 1<<n.bits - 1
	case neg:
		limit++ // -(1<<(bits-1))
	}
	for _, c := range d[start+b2i(neg) : intEnd] {
		if v > (limit-uint64(c-'0'))/10 {
			return failf("%s is out of range (%d bits)", quoteNum(lit), n.bits)
		}
		v = v*10 + uint64(c-'0')
	}
	return nil
}

// quoteNum shows a number literal, at most 32 bytes of it.
func quoteNum(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "..."
	}
	return string(b)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
