package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Error is a body refused: Field names the value at fault with its
// indices ("descriptors[0].entries[2].value"; "body" for the body as a
// whole), Msg says what is wrong, Status is the HTTP status to answer
// (400, or 413 for a body above its bound).
type Error struct {
	Status int
	Field  string
	Msg    string
}

func (e *Error) Error() string { return e.Field + ": " + e.Msg }

// Decode checks data against s, then unmarshals it into v (a pointer to
// the schema's type, or the proto.Message of ForProto). A refusal is an
// *Error naming the field; nothing was decoded into v then.
func (s *Schema) Decode(data []byte, v any) error {
	sc := scanner{data: data}
	sc.ws()
	if sc.pos == len(data) {
		return &Error{Status: 400, Field: "body", Msg: "empty; want a JSON object"}
	}
	if err := sc.value(s.root); err != nil {
		return err.toError()
	}
	sc.ws()
	if sc.pos != len(data) {
		return &Error{Status: 400, Field: "body", Msg: fmt.Sprintf("trailing data after the JSON value (at byte %d)", sc.pos)}
	}
	if err := s.unmarshal(data, v); err != nil {
		// what the scan does not check: a float's range, base64, a
		// protobuf enum's name, a protojson integer's range
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" {
			return &Error{Status: 400, Field: typ.Field, Msg: fmt.Sprintf("want %s, got JSON %s", typ.Type, typ.Value)}
		}
		return &Error{Status: 400, Field: "body", Msg: err.Error()}
	}
	return nil
}

// maxPooled is the largest body buffer kept for reuse: requests are
// nearly always a few hundred bytes; a large one's buffer goes to the GC.
const maxPooled = 64 << 10

var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// Read reads r's body, at most maxBody bytes, and decodes it with s into
// v. A Content-Length above maxBody is refused (413) before a byte is
// read, and the answer closes an HTTP/1 connection (Connection: close),
// so the server does not read the body either; a body that turns out larger is
// refused the same way at its bound. The body is read into pooled memory
// that grows as bytes arrive (a declared length reserves nothing beyond
// maxPooled), so a slow client holds what it sent and no more. Errors are
// *Error.
func (s *Schema) Read(w http.ResponseWriter, r *http.Request, maxBody int64, v any) error {
	if r.ContentLength > maxBody {
		if r.ProtoMajor == 1 { // HTTP/2 resets the stream; there, close would end the whole connection
			w.Header().Set("Connection", "close")
		}
		return &Error{Status: http.StatusRequestEntityTooLarge, Field: "body",
			Msg: fmt.Sprintf("larger than %d bytes (Content-Length %d)", maxBody, r.ContentLength)}
	}
	bp := bodies.Get().(*[]byte)
	b, err := readAll(http.MaxBytesReader(w, r.Body, maxBody), (*bp)[:0], r.ContentLength)
	defer func() {
		if cap(b) <= maxPooled {
			*bp = b[:0]
			bodies.Put(bp)
		}
	}()
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &Error{Status: http.StatusRequestEntityTooLarge, Field: "body", Msg: fmt.Sprintf("larger than %d bytes", tooBig.Limit)}
		}
		return &Error{Status: http.StatusBadRequest, Field: "body", Msg: "reading: " + err.Error()}
	}
	return s.Decode(b, v)
}

// readAll reads rd to its end into b, reserving up to maxPooled bytes
// for a declared length.
func readAll(rd io.Reader, b []byte, declared int64) ([]byte, error) {
	if declared > 0 && declared < maxPooled && int(declared) >= cap(b) {
		b = make([]byte, 0, declared+1) // +1: the read that sees EOF needs room
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
