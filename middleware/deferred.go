package middleware

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/deferred"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// hopByHop are the headers of one connection, never of the request
// itself (RFC 9110 §7.6.1), and those the drain sets.
var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Host": true, "Content-Length": true,
	"Idempotency-Key": true}

// deferRequest answers a deferred request: 202 with its ticket when the
// queue takes it; 413 when its body is too large to defer, 400 when the
// queue refuses its payload (a path with dot segments). It returns
// false (the caller answers 429) when there is no queue or the queue
// refused it.
func (l *Limiter) deferRequest(w http.ResponseWriter, r *http.Request, cl *call) bool {
	if l.opts.Queue == nil {
		cl.d.Refuse()
		return false
	}
	p, err := l.payload(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return true
	}
	rc, err := l.opts.Queue.Enqueue(r.Context(), &cl.req, &cl.d, p)
	var fe *ratelimit.FieldError
	switch {
	case errors.Is(err, deferred.ErrPayloadTooLarge):
		http.Error(w, "request too large to defer: "+err.Error(), http.StatusRequestEntityTooLarge)
		return true
	case errors.As(err, &fe):
		// the request itself cannot be deferred (a path with dot
		// segments, say): waiting would not help, so not a 429
		http.Error(w, "request cannot be deferred: "+err.Error(), http.StatusBadRequest)
		return true
	case err != nil:
		l.logFailure(err)
		cl.d.Refuse()
		return false
	}
	ratelimit.SetHeaders(w.Header(), &cl.d)
	w.Header().Set("Location", l.opts.DeferredPath+rc.Ticket)
	w.Header().Set("Retry-After", strconv.FormatInt(max(ratelimit.CeilSeconds(rc.ETA), 1), 10))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(struct {
		Ticket       string `json:"ticket"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}{rc.Ticket, max(rc.ETA.Milliseconds(), 1)})
	return true
}

// payload is r as an item's payload.
func (l *Limiter) payload(r *http.Request) (*deferred.Payload, error) {
	p := &deferred.Payload{Method: r.Method, Path: r.URL.EscapedPath(), Headers: map[string]string{}}
	if p.Path == "" || !strings.HasPrefix(p.Path, "/") || strings.HasPrefix(p.Path, "//") {
		p.Path = "/" + strings.TrimLeft(p.Path, "/")
	}
	if r.URL.RawQuery != "" {
		p.Path += "?" + r.URL.RawQuery
	}
	drop := map[string]bool{}
	for _, f := range r.Header.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			drop[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
		}
	}
	for _, name := range l.opts.SensitiveHeaders {
		drop[http.CanonicalHeaderKey(name)] = true
	}
	for k, vs := range r.Header {
		if hopByHop[k] || drop[k] {
			continue
		}
		p.Headers[k] = strings.Join(vs, ", ")
	}
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, l.opts.MaxDeferBody+1))
		if err != nil {
			return nil, errors.New("request body unreadable: " + err.Error())
		}
		if int64(len(b)) > l.opts.MaxDeferBody {
			return nil, errors.New("request body larger than " + strconv.FormatInt(l.opts.MaxDeferBody, 10) + " bytes: too large to defer")
		}
		if utf8.Valid(b) {
			p.Body = string(b)
		} else {
			p.BodyBase64 = base64.StdEncoding.EncodeToString(b)
		}
	}
	return p, nil
}
