package deferred

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// maxPathDecodes is how many rounds of percent-decoding a payload path is
// checked through: a server (or a proxy before it) that decodes twice
// turns %252e into %2e and then into a dot. Past it a path that still
// decodes to something new is refused: nobody encodes a path four times.
const maxPathDecodes = 3

// checkPath reports why p cannot be a payload's path: the drain joins it
// to the rule's target, so it must stay under the target's base path
// whatever the server behind it normalises. Refused, at every round of
// percent-decoding: dot segments ("." or "..", also as %2e, behind an
// encoded slash %2f, with a path parameter "..;x", or made of Unicode
// dots that NFKC folds to "."), backslashes (some servers read them as
// slashes), NUL and control characters, and bytes that are not UTF-8
// once decoded (overlong forms of "." such as %c0%ae). The raw path
// must be well formed: every % followed by two hex digits. The query,
// after the first "?", is the target's to read and is not inspected.
func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//"):
		return errors.New("want an absolute path (and query) starting with one /")
	case !utf8.ValidString(p):
		return errors.New("not UTF-8")
	case strings.ContainsAny(p, " #"):
		return errors.New("a path may not hold spaces or #")
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("control character %#02x at byte %d", c, i)
		}
	}
	path := p
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	for i := 0; i < len(path); i++ {
		if path[i] == '%' && (i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2])) {
			return fmt.Errorf("malformed percent-escape at byte %d (want %%XX, two hex digits)", i)
		}
	}
	for round := 0; ; round++ {
		if err := checkSegments(path, round > 0); err != nil {
			if round > 0 {
				return fmt.Errorf("%w (once percent-decoded %d times)", err, round)
			}
			return err
		}
		next, changed := percentDecode(path)
		if !changed {
			return nil
		}
		if round == maxPathDecodes {
			return fmt.Errorf("still percent-encoded after %d decodings", maxPathDecodes)
		}
		path = next
	}
}

// checkSegments checks one decoding of a path; decoded says '?' and '#'
// are characters a server may now read as the path's end.
func checkSegments(path string, decoded bool) error {
	if !utf8.ValidString(path) {
		return errors.New("not UTF-8")
	}
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '\\':
			return errors.New("a backslash (read as a slash by some servers)")
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("control character %#02x", c)
		}
	}
	for seg := range strings.SplitSeq(path, "/") {
		// a path parameter (`..;x=1`, read as `..` by Tomcat and
		// others), and a decoded ? or # that ends the path there
		end := ";"
		if decoded {
			end = ";?#"
		}
		if i := strings.IndexAny(seg, end); i >= 0 {
			seg = seg[:i]
		}
		if seg == "" {
			continue
		}
		folded := norm.NFKC.String(seg)
		if strings.Trim(folded, ".") == "" {
			return fmt.Errorf("a dot segment %q (it would leave the target's base path)", seg)
		}
		if strings.ContainsAny(folded, "/\\") {
			return fmt.Errorf("segment %q holds a character that folds to a slash", seg)
		}
	}
	return nil
}

// percentDecode decodes every well-formed %XX of s once; a % that is not
// one stays as it is.
func percentDecode(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s))
	changed := false
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			changed = true
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String(), changed
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
