// Package deferred is the deferred queue: a request over an `on_exceed:
// defer` rule becomes an Item on the deferred topic (Queue), and a drain
// (Drain) releases each key's items in order when the key has budget
// again — every release a decision through the same counters — and
// delivers them to the rule's target, at least once, under the ticket as
// idempotency key. The package knows nothing of fx or HTTP servers; the
// checker, the HTTP API and the middleware call Queue, `velvetrope drain`
// runs Drain.
package deferred

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/httpjson"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// ItemVersion is the schema version of the records on the deferred topic.
const ItemVersion = 1

// Item is one deferred request, the value of one record on the deferred
// topic (JSON; the record's key is Key).
type Item struct {
	V           int          `json:"v"`
	Ticket      string       `json:"ticket"`
	Domain      string       `json:"domain"`
	Rule        string       `json:"rule"` // the rule that deferred it (its first deferring status)
	Key         string       `json:"key"`  // that rule's counter key: one key's items keep their order
	Descriptors []Descriptor `json:"descriptors"`
	Hits        int64        `json:"hits"`
	EnqueuedAt  time.Time    `json:"enqueued_at"`
	Deadline    time.Time    `json:"deadline"` // enqueue time + the rule's max_age
	Payload     *Payload     `json:"payload,omitempty"`
	// Hashed says the values of hash_values rules are hashed (as the
	// counters hold them), and each descriptor names the rule it matched:
	// a hash matches no rule value.
	Hashed bool `json:"hashed,omitempty"`
}

// Descriptor is one descriptor of a deferred request, as decided.
type Descriptor struct {
	Entries []Entry `json:"entries"`
	Hits    *int64  `json:"hits,omitempty"`
	Rule    string  `json:"rule,omitempty"` // the rule it matched, when the item is Hashed
}

// Entry is one key=value pair.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Payload is the work a deferred request carries: what the drain sends
// to the rule's target. Body is text; BodyBase64 carries binary bodies
// (one of them at most). It is the payload of POST /v1/check
// ([httpjson.Payload]: its fields and their JSON, in the item as in the
// API), with its checks.
type Payload httpjson.Payload

// NewTicket returns a fresh ticket: 16 random bytes, URL-safe base64 (22
// characters).
func NewTicket() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ValidTicket reports whether s has a ticket's form, so that an API can
// refuse anything else before it reaches the store.
func ValidTicket(s string) bool {
	if len(s) != 22 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Request is the checker request the item's release decides under rs:
// the same descriptors and hits, marked as a release (and, for a hashed
// item, as hashed already, each descriptor decided by the rule it matched
// when it was deferred, if rs still has it).
func (it *Item) Request(rs *config.RuleSet) ratelimit.Request {
	req := ratelimit.Request{Domain: it.Domain, Hits: it.Hits, Release: true, Prehashed: it.Hashed,
		Descriptors: make([]ratelimit.Descriptor, len(it.Descriptors))}
	for i, d := range it.Descriptors {
		es := make([]config.Entry, len(d.Entries))
		for j, e := range d.Entries {
			es[j] = config.Entry{Key: e.Key, Value: e.Value}
		}
		req.Descriptors[i].Entries = es
		if d.Hits != nil {
			req.Descriptors[i].Hits, req.Descriptors[i].HasHits = *d.Hits, true
		}
		if it.Hashed && d.Rule != "" && rs != nil {
			if r := rs.RuleByID(d.Rule); r != nil && r.Domain == it.Domain {
				req.Descriptors[i].Rule = r
			}
		}
	}
	return req
}

// Encode is the item's record value.
func Encode(it *Item) ([]byte, error) { return json.Marshal(it) }

// MaxItemBytes bounds one record on the deferred topic: the largest
// payload (config.MaxDeferPayloadBytes, in base64) and the request around it.
const MaxItemBytes = 800 << 10

// Decode parses a record value strictly: one JSON object of schema
// version 1, no unknown fields, every field an item needs. Whatever it
// refuses is malformed for good (the drain sets it aside).
func Decode(b []byte) (*Item, error) {
	if len(b) > MaxItemBytes {
		return nil, fmt.Errorf("deferred item: %d bytes, more than %d", len(b), MaxItemBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var it Item
	if err := dec.Decode(&it); err != nil {
		return nil, fmt.Errorf("deferred item: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("deferred item: trailing data after the JSON object")
	}
	if err := it.validate(); err != nil {
		return nil, fmt.Errorf("deferred item: %w", err)
	}
	return &it, nil
}

func (it *Item) validate() error {
	switch {
	case it.V != ItemVersion:
		return fmt.Errorf("v: version %d, want %d", it.V, ItemVersion)
	case !ValidTicket(it.Ticket):
		return fmt.Errorf("ticket: %q is not a ticket", it.Ticket)
	case it.Domain == "":
		return errors.New("domain: empty")
	case it.Rule == "":
		return errors.New("rule: empty")
	case it.Key == "":
		return errors.New("key: empty")
	case len(it.Descriptors) == 0 || len(it.Descriptors) > config.MaxDescriptors:
		return fmt.Errorf("descriptors: %d, want 1 to %d", len(it.Descriptors), config.MaxDescriptors)
	case it.Hits < 0 || it.Hits > ratelimit.MaxHits:
		return fmt.Errorf("hits: %d out of range", it.Hits)
	case it.EnqueuedAt.IsZero() || it.Deadline.Before(it.EnqueuedAt):
		return errors.New("enqueued_at, deadline: missing or out of order")
	}
	for i, d := range it.Descriptors {
		if len(d.Entries) == 0 || len(d.Entries) > config.MaxEntries {
			return fmt.Errorf("descriptors[%d].entries: %d, want 1 to %d", i, len(d.Entries), config.MaxEntries)
		}
		if d.Hits != nil && (*d.Hits < 0 || *d.Hits > ratelimit.MaxHits) {
			return fmt.Errorf("descriptors[%d].hits: %d out of range", i, *d.Hits)
		}
	}
	if it.Payload != nil {
		if err := it.Payload.Check(1 << 62); err != nil {
			return err
		}
	}
	return nil
}

// Check validates a payload and its size against limit bytes (the body,
// decoded, plus the headers): it returns a *ratelimit.FieldError naming the
// payload field at fault.
func (p *Payload) Check(limit int64) error {
	bad := func(field, format string, args ...any) error {
		return &ratelimit.FieldError{Field: "payload." + field, Err: fmt.Errorf(format, args...)}
	}
	if p.Method != "" && !token(p.Method) {
		return bad("method", "%q is not an HTTP method", p.Method)
	}
	if p.Path != "" {
		if err := checkPath(p.Path); err != nil {
			return bad("path", "%q: %v", quoteShort(p.Path), err)
		}
	}
	if p.Body != "" && p.BodyBase64 != "" {
		return bad("body_base64", "give body or body_base64, not both")
	}
	size := int64(len(p.Body) + len(p.Method) + len(p.Path))
	if p.BodyBase64 != "" {
		n, err := base64.StdEncoding.DecodeString(p.BodyBase64)
		if err != nil {
			return bad("body_base64", "not standard base64: %v", err)
		}
		size += int64(len(n))
	}
	for k, v := range p.Headers {
		if !token(k) {
			return bad("headers", "%q is not a header name", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return bad("headers", "header %s: a value may not hold CR, LF or NUL", k)
		}
		if reserved(k) {
			return bad("headers", "header %s is set by the drain (or the connection), not by the payload", k)
		}
		size += int64(len(k) + len(v))
	}
	if size > limit {
		return bad("body", "the payload is %d bytes, more than the rule's max_payload_bytes %d", size, limit)
	}
	return nil
}

// quoteShort is s cut to 200 bytes, for an error that quotes input.
func quoteShort(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// reserved are the headers a payload may not set: the drain's own and
// the connection's.
func reserved(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Idempotency-Key", "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
		"Upgrade", "Te", "Trailer", "Proxy-Connection":
		return true
	}
	return false
}

// token reports whether s is an RFC 9110 token (method and header names).
func token(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// DeadLetter is one record on the dead-letter topic: the item and why it
// was set aside. Raw holds a record that was not an item at all.
type DeadLetter struct {
	Reason string `json:"reason"` // expired | attempts | rejected | malformed | rule
	// Detail says why, as the ticket does, and then, in parentheses, the
	// error behind it (a delivery's, with the target's URL: the topic is
	// the operators', the ticket anyone's who holds it).
	Detail   string    `json:"detail"`
	DeadAt   time.Time `json:"dead_at"`
	Attempts int       `json:"attempts"`
	Item     *Item     `json:"item,omitempty"`
	Raw      []byte    `json:"raw,omitempty"`
}
