package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Error is one problem in a configuration, with where it comes from: a
// position in a file (File, Line, Column), or the environment variable or
// command-line flag that set the value (Source). Key, when set, is the
// setting's key path (http.addr, checker.heartbeat/instance_ttl,
// redis.addrs[1]). Error prints the origin first, then the key:
//
//	velvetrope.yaml:2:3: http.adr2: unknown field; known: addr, tls, ...
//	VELVETROPE_HTTP_ADDR: http.addr: want host:port, got "8080" (...)
type Error struct {
	File   string
	Line   int
	Column int
	Source string
	Key    string
	Msg    string
}

func (e *Error) Error() string {
	msg := e.Msg
	if e.Key != "" {
		msg = e.Key + ": " + msg
	}
	switch {
	case e.Line > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, msg)
	case e.Source != "":
		return e.Source + ": " + msg
	case e.File != "":
		return e.File + ": " + msg
	}
	return msg
}

// pathErrorMsg is err's text for an error that already names file: the
// path an *fs.PathError repeats is dropped ("nope.yaml: no such file or
// directory", not "nope.yaml: stat nope.yaml: no such file or
// directory").
func pathErrorMsg(file string, err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) && (pe.Path == file || strings.HasSuffix(file, string(filepath.Separator)+pe.Path)) {
		return pe.Err.Error()
	}
	return err.Error()
}

// ErrorList is every problem found in one load, in file order. A load
// reports all of them rather than stopping at the first.
type ErrorList []*Error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// err returns l as an error, or nil when it is empty.
func (l ErrorList) err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// maxQuoted bounds the bytes of a rule file's text one error message
// quotes (a value, a key): enough to recognise it, never a dump.
const maxQuoted = 256

// clip cuts s, text read from a rule file, at its first line break and at
// maxQuoted bytes (on a rune boundary), marking a cut with "…". An error
// then carries at most the offending line of the file: a file that is not
// a rule file at all (say a secret the rules directory linked to) is never
// copied into the errors, and so into a log.
func clip(s string) string {
	cut := false
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s, cut = s[:i], true
	}
	if len(s) > maxQuoted {
		n := maxQuoted
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s, cut = s[:n], true
	}
	return s + cutMark(cut)
}

// cutMark marks text an error message cut short.
func cutMark(cut bool) string {
	if cut {
		return "…"
	}
	return ""
}

// quoted is text already made fit for an error message (quoted and
// clipped): errorf passes it through as it is.
type quoted string
