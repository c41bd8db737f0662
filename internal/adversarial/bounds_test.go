package adversarial

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Item 6 of issue 19: the decoders bounded a request only after they had
// decoded all of it, and nothing bounded the requests in flight. Each test
// here is one attack of the probe, against a process of its own (VmHWM is
// the peak of the process's resident set since it started).

const mib = 1 << 20

// emptyEntriesJSON is a body of about size bytes for /v1/check or /json
// (the same shape in both): one descriptor of as many empty entries as
// fit, the probe's ~350,000 in a MiB.
func emptyEntriesJSON(size int) []byte {
	head, tail := `{"domain":"api","descriptors":[{"entries":[`, `{}]}]}`
	b := make([]byte, 0, size)
	b = append(b, head...)
	for range (size - len(head) - len(tail)) / 3 {
		b = append(b, "{},"...)
	}
	return append(b, tail...)
}

// answer is one HTTP answer of a concurrent attack.
type answer struct {
	code int
	body string
	err  error
}

// postAll sends n concurrent POSTs of body to path and returns the answers.
func postAll(p *proc, path string, body []byte, n int) []answer {
	out := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", "http://"+p.HTTP+path, bytes.NewReader(body))
			if err != nil {
				out[i].err = err
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out[i].err = err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			out[i] = answer{code: resp.StatusCode, body: string(b)}
		})
	}
	wg.Wait()
	return out
}

// checkPeak fails t when the process's peak resident set went above
// boundMB (the probe's figure before the fix is in the message).
func checkPeak(t *testing.T, p *proc, boundMB int64, before string) {
	t.Helper()
	hwm := p.rssKB(t, "VmHWM")
	t.Logf("peak resident set: %d MB (bound %d MB; before the fix: %s)", hwm>>10, boundMB, before)
	if hwm > boundMB<<10 {
		t.Fatalf("peak resident set %d MB, above the bound of %d MB (before the fix: %s)", hwm>>10, boundMB, before)
	}
}

// TestHugeEntryBodiesAreRefusedAsRead: 16 concurrent 1 MiB bodies of
// ~350,000 empty entries took dev from 29 MB to 448 MB (/v1/check) and
// 670 MB (/json): every entry was decoded before limits.max_entries was
// looked at. Now each is refused at the ninth entry, naming the field and
// the bound, and the process stays under 120 MB.
func TestHugeEntryBodiesAreRefusedAsRead(t *testing.T) {
	for _, c := range []struct{ path, before string }{{"/v1/check", "448 MB"}, {"/json", "670 MB"}} {
		t.Run(strings.TrimPrefix(c.path, "/"), func(t *testing.T) {
			p := start(t, options{})
			body := emptyEntriesJSON(mib - 64)
			for round := range 2 {
				for i, a := range postAll(p, c.path, body, 16) {
					if a.err != nil || a.code != 400 || !strings.Contains(a.body, "descriptors[0].entries") || !strings.Contains(a.body, "more than 8") {
						t.Fatalf("round %d request %d: %d %.200s %v, want 400 naming descriptors[0].entries and its bound (more than 8)", round, i, a.code, a.body, a.err)
					}
				}
			}
			if p.exited() {
				t.Fatalf("the process died under the attack:\n%s", p.logs())
			}
			checkPeak(t, p, 120, c.before)
		})
	}
}

// rawCodec sends and receives gRPC messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append((*v.(*[]byte))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// emptyEntriesProto is a RateLimitRequest of about size bytes: domain
// "api" and one descriptor of empty entries (field 1, length 0: two bytes
// each).
func emptyEntriesProto(size int) []byte {
	n := (size - 64) / 2
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, "api")
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(2*n))
	for range n {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, 0)
	}
	return b
}

// TestHugeGRPCMessagesAreRefusedAsRead: 32 concurrent 1 MiB messages of
// empty entries took dev from 95 MB to 634 MB (a same-size message of one
// unknown field: 95 MB). Now the wire parser stops at the ninth entry and
// the process stays within 120 MB.
func TestHugeGRPCMessagesAreRefusedAsRead(t *testing.T) {
	p := start(t, options{})
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := emptyEntriesProto(mib - 64)
	for round := range 2 {
		errs := make([]error, 32)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var out []byte
				errs[i] = conn.Invoke(ctx, shouldRateLimit, &msg, &out)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if st := status.Convert(err); st.Code() != codes.InvalidArgument ||
				!strings.Contains(st.Message(), "descriptors[0].entries") || !strings.Contains(st.Message(), "more than 8") {
				t.Fatalf("round %d call %d: %v, want InvalidArgument naming descriptors[0].entries and its bound (more than 8)", round, i, err)
			}
		}
	}
	checkPeak(t, p, 120, "634 MB")
}

// h2Conn is a raw HTTP/2 connection to a gRPC listener: what an attacker
// opening streams by hand has, without a client library's courtesy.
type h2Conn struct {
	c   net.Conn
	fr  *http2.Framer
	wmu sync.Mutex
	// maxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS (0: none sent).
	maxStreams uint32
}

func dialH2(t *testing.T, addr string) *h2Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &h2Conn{c: c, fr: http2.NewFramer(c, c)}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's settings: %v", err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			if v, ok := s.Value(http2.SettingMaxConcurrentStreams); ok {
				h.maxStreams = v
			}
			if err := h.fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	return h
}

// open sends the headers of a ShouldRateLimit call on stream id and never
// its message; timeout, when not empty, is its grpc-timeout ("3600S").
func (h *h2Conn) open(id uint32, authority, timeout string) error {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", shouldRateLimit},
		{":authority", authority}, {"content-type", "application/grpc"}, {"te", "trailers"}}
	if timeout != "" {
		fields = append(fields, [2]string{"grpc-timeout", timeout})
	}
	for _, f := range fields {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return err
		}
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
}

// streamEnd is how the server ended one stream and when.
type streamEnd struct {
	refused bool   // RST_STREAM REFUSED_STREAM: never started
	status  string // grpc-status of the trailers, or "rst <code>"
	at      time.Duration
}

// TestIdleGRPCStreamsAreCappedAndClosed: 5,000 streams that never sent
// their message stayed open on one connection for as long as it lived.
// Now a connection carries at most grpc.max_concurrent_streams (256) at
// once, the rest are refused, and a stream that has sent nothing is
// closed at grpc.call_timeout (10 s), whether its client set no deadline
// or one an hour away; the process stays within 60 MB (85 MB before).
func TestIdleGRPCStreamsAreCappedAndClosed(t *testing.T) {
	const streams, maxStreams, callTimeout = 5000, 256, 10 * time.Second
	p := start(t, options{})
	h := dialH2(t, p.GRPC)
	if h.maxStreams == 0 || h.maxStreams > maxStreams {
		t.Errorf("the server's SETTINGS_MAX_CONCURRENT_STREAMS is %d (0: unlimited), want at most %d", h.maxStreams, maxStreams)
	}
	began := time.Now()
	ends := make(map[uint32]streamEnd, streams)
	var mu sync.Mutex
	readDone := make(chan error, 1)
	go func() {
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				readDone <- err
				return
			}
			mu.Lock()
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				if _, ok := ends[f.StreamID]; !ok {
					ends[f.StreamID] = streamEnd{refused: f.ErrCode == http2.ErrCodeRefusedStream, status: "rst " + f.ErrCode.String(), at: time.Since(began)}
				}
			case *http2.MetaHeadersFrame:
				if f.StreamEnded() {
					ends[f.StreamID] = streamEnd{status: f.PseudoValue("status") + " grpc-status " + headerValue(f, "grpc-status"), at: time.Since(began)}
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					h.wmu.Lock()
					_ = h.fr.WritePing(true, f.Data)
					h.wmu.Unlock()
				}
			case *http2.GoAwayFrame:
				mu.Unlock()
				readDone <- fmt.Errorf("GOAWAY %v", f.ErrCode)
				return
			}
			mu.Unlock()
		}
	}()
	for i := range streams {
		timeout := ""
		if i%2 == 1 {
			timeout = "3600S" // an hour: no longer than grpc.call_timeout either
		}
		if err := h.open(uint32(2*i+1), p.GRPC, timeout); err != nil {
			t.Fatalf("opening stream %d: %v", i, err)
		}
	}
	ended := func() int { mu.Lock(); defer mu.Unlock(); return len(ends) }
	deadline := time.Now().Add(callTimeout + 5*time.Second)
	for ended() < streams && time.Now().Before(deadline) {
		select {
		case err := <-readDone:
			t.Fatalf("the connection ended after %d of %d streams: %v", ended(), streams, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	refused, timedOut, other := 0, 0, map[string]int{}
	var last time.Duration
	for _, e := range ends {
		switch {
		case e.refused:
			refused++
		case strings.HasSuffix(e.status, "grpc-status 4"): // DEADLINE_EXCEEDED
			timedOut++
			last = max(last, e.at)
		default:
			other[e.status]++
		}
	}
	t.Logf("%d streams: %d refused, %d closed idle (the last at %v), other ends %v, %d still open",
		streams, refused, timedOut, last.Round(time.Millisecond), other, streams-len(ends))
	if len(ends) < streams {
		t.Fatalf("%d of %d idle streams still open %v after they were opened (want every one refused or closed within grpc.call_timeout %v)",
			streams-len(ends), streams, time.Since(began).Round(time.Second), callTimeout)
	}
	if served := streams - refused; served > maxStreams {
		t.Fatalf("%d streams were started on one connection, want at most %d (the rest refused)", served, maxStreams)
	}
	if timedOut == 0 || last > callTimeout+3*time.Second {
		t.Fatalf("idle streams closed: %d, the last at %v; want them closed at grpc.call_timeout (%v)", timedOut, last, callTimeout)
	}
	checkPeak(t, p, 60, "85 MB, the 5,000 streams held open")
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// holdBody starts a POST to path declaring a body of size bytes and sends
// all of it but the last byte: the request stays in flight, holding what
// the server read of it, until release is closed. It returns the
// connection and a channel with the server's answer line.
func holdBody(t *testing.T, addr, path string, size int, release <-chan struct{}) (net.Conn, <-chan string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, size)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	answer := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		n, _ := io.ReadAtLeast(c, b, 12)
		answer <- string(b[:n])
	}()
	go func() {
		body := bigValueBody(size)
		if _, err := c.Write(body[:size-1]); err != nil {
			return // refused and closed: what the test wants of the extra ones
		}
		<-release
		_, _ = c.Write(body[size-1:])
	}()
	return c, answer
}

var bigBodies sync.Map // size → []byte

// bigValueBody is a well-formed /v1/check body of exactly size bytes: its
// bulk is one long value, which a server must hold to decode.
func bigValueBody(size int) []byte {
	if b, ok := bigBodies.Load(size); ok {
		return b.([]byte)
	}
	head, tail := `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"`, `"}]}]}`
	b := append([]byte(head), bytes.Repeat([]byte("v"), size-len(head)-len(tail))...)
	b = append(b, tail...)
	bigBodies.Store(size, b)
	return b
}

// TestHTTPBodiesInFlightAreBounded: nothing bounded what one HTTP
// listener held of bodies, so 216 slow 1 MiB bodies took dev to 401 MB.
// With http.max_body_bytes_in_flight at 15.5 MiB, fifteen slow bodies
// fill the budget (no other whole body fits); 200 more get 503 with Retry-After and a JSON error naming
// it as soon as their bytes do not fit; the probes still answer; the
// process stays within 100 MB; and the held requests are decided when
// they finish (a 400: their one value is past limits.max_value_bytes).
func TestHTTPBodiesInFlightAreBounded(t *testing.T) {
	const held, extra, size = 15, 200, mib - 64
	p := start(t, options{config: "http:\n  max_body_bytes_in_flight: 16252928\n  read_timeout: 30s\n"})
	release := make(chan struct{})
	var answers []<-chan string
	for range held {
		_, a := holdBody(t, p.HTTP, "/v1/check", size, release)
		answers = append(answers, a)
	}
	eventually(t, 10*time.Second, "the slow bodies fill the budget", func() bool {
		return p.metric(t, "velvetrope_http_body_bytes") >= float64(held*(size-1))
	})
	t.Logf("the slow bodies hold %.0f bytes", p.metric(t, "velvetrope_http_body_bytes"))
	began := time.Now()
	refusedAt := make([]<-chan string, extra)
	for i := range extra {
		_, refusedAt[i] = holdBody(t, p.HTTP, "/v1/check", size, release)
	}
	for i, a := range refusedAt {
		select {
		case got := <-a:
			if !strings.HasPrefix(got, "HTTP/1.1 503") || !strings.Contains(got, "Retry-After: ") || !strings.Contains(got, "http.max_body_bytes_in_flight") {
				t.Fatalf("request %d beyond the budget: %q, want 503 with Retry-After and a JSON error naming the budget", i, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d beyond the budget: no answer within 10 s (want 503 once its bytes do not fit)", i)
		}
	}
	t.Logf("%d requests beyond the budget refused in %v", extra, time.Since(began).Round(time.Millisecond))
	if code, _ := p.do(t, "GET", "/healthz", ""); code != 200 {
		t.Fatalf("/healthz with the budget spent: %d, want 200", code)
	}
	checkPeak(t, p, 100, "401 MB: every slow body held")
	close(release)
	for i, a := range answers {
		select {
		case got := <-a:
			if !strings.HasPrefix(got, "HTTP/1.1 400") || !strings.Contains(got, "descriptors[0].entries[0].value: longer than 1024 bytes") {
				t.Fatalf("held request %d once finished: %.300q, want it decided: 400, its value past the bound", i, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("held request %d: no answer once its body was complete", i)
		}
	}
}

// TestSlowBodiesDoNotShutOthersOut: the first cap on requests in flight
// counted a request from its headers, so 256 connections that each sent
// headers and one byte of body shut every other client out until
// http.read_timeout, again and again (found by probing the fix). A body
// still arriving holds only its bytes of the budget, and a slot only once
// it has arrived: beside 300 such clients a request is decided at once.
func TestSlowBodiesDoNotShutOthersOut(t *testing.T) {
	p := start(t, options{config: "http:\n  read_timeout: 30s\n"})
	for range 300 {
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	}
	eventually(t, 10*time.Second, "the slow clients connected", func() bool { return p.metric(t, "velvetrope_http_body_bytes") > 0 })
	for i := range 5 {
		code, body := p.do(t, "POST", "/v1/check", `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}]}`)
		if code != 200 {
			t.Fatalf("request %d beside 300 slow bodies: %d %s, want it decided", i, code, body)
		}
	}
}

// TestOversizedBodyIsRefusedBeforeReading: a Content-Length above
// http.max_body_bytes is 413 at once; the server does not wait for a body
// it would refuse.
func TestOversizedBodyIsRefusedBeforeReading(t *testing.T) {
	const token = "adversarial-token"
	p := start(t, options{config: "admin:\n  token: " + token + "\n"})
	for _, path := range []string{"/v1/check", "/json", "/v1/controls", "/v1/keys/reset", "/v1/rules/validate"} {
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, token, 64*mib)
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b := make([]byte, 4096)
		n, err := io.ReadAtLeast(c, b, 12)
		c.Close()
		if err != nil || !strings.HasPrefix(string(b[:n]), "HTTP/1.1 413") {
			t.Fatalf("%s with Content-Length 64 MiB and no body: %q %v, want 413 at once", path, b[:n], err)
		}
	}
}

// Item 12 (JSON): field names matched case-insensitively, duplicate
// fields were accepted (the last won), and invalid UTF-8 and lone
// surrogates became U+FFFD. Every JSON body a process takes now refuses
// them with a 400 naming the field.
func TestStrictJSONOnEverySurface(t *testing.T) {
	const token = "adversarial-token"
	p := start(t, options{
		config: "admin:\n  token: " + token + "\n",
		rules: map[string]string{"shop.yaml": `domain: shop
pools:
  - name: shared
    rate_limit: {unit: minute, requests_per_unit: 100}
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
    algorithm: fixed_window
    throttle: {type: elastic, pool: shared, max_multiplier: 3}
`, "api.yaml": `domain: api
descriptors:
  - key: user_id
    rate_limit: {unit: minute, requests_per_unit: 100}
`}})
	check := func(domain, rest string) string {
		return `{"domain":"` + domain + `"` + rest + `,"descriptors":[{"entries":[{"key":"user_id","value":"u"}]}]}`
	}
	value := func(v string) string {
		return `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"` + v + `"}]}]}`
	}
	cases := []struct {
		name, method, path, body string
		field                    string // named in the answer
	}{
		{"check: other case", "POST", "/v1/check", check("api", `,"Domain":"shop"`), "Domain"},
		{"check: duplicate", "POST", "/v1/check", check("api", `,"domain":"shop"`), "domain"},
		{"check: duplicate, escaped", "POST", "/v1/check", check("api", `,"dom\u0061in":"shop"`), "domain"},
		{"check: invalid UTF-8", "POST", "/v1/check", value("a\xffb"), "descriptors[0].entries[0].value"},
		{"check: lone surrogate", "POST", "/v1/check", value(`a\ud800b`), "descriptors[0].entries[0].value"},
		{"check: lone low surrogate", "POST", "/v1/check", value(`\udc00`), "descriptors[0].entries[0].value"},
		{"json: other case", "POST", "/json", check("api", `,"Domain":"shop"`), "Domain"},
		{"json: duplicate", "POST", "/json", check("api", `,"domain":"shop"`), "domain"},
		{"json: both names of one field", "POST", "/json", `{"domain":"api","hitsAddend":1,"hits_addend":2,"descriptors":[{"entries":[{"key":"user_id","value":"u"}]}]}`, "hits_addend"},
		{"json: invalid UTF-8", "POST", "/json", value("a\xffb"), "descriptors[0].entries[0].value"},
		{"json: lone surrogate", "POST", "/json", value(`a\ud800b`), "descriptors[0].entries[0].value"},
		{"controls: other case", "POST", "/v1/controls", `{"domain":"api","descriptor":"user_id=u","action":"deny","Action":"allow"}`, "Action"},
		{"controls: duplicate", "POST", "/v1/controls", `{"domain":"api","descriptor":"user_id=u","action":"allow","action":"deny"}`, "action"},
		{"controls: lone surrogate", "POST", "/v1/controls", `{"domain":"api","descriptor":"user_id=u","action":"deny","reason":"\ud800"}`, "reason"},
		{"keys reset: invalid UTF-8", "POST", "/v1/keys/reset", "{\"domain\":\"api\",\"entries\":[{\"key\":\"user_id\",\"value\":\"\xc3\"}]}", "entries[0].value"},
		{"pools: other case", "PUT", "/v1/pools/shop/shared", `{"Requests_Per_Unit":7}`, "Requests_Per_Unit"},
		{"pools: duplicate", "PUT", "/v1/pools/shop/shared", `{"requests_per_unit":7,"requests_per_unit":1000000}`, "requests_per_unit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := p.do(t, c.method, c.path, c.body, "Authorization", "Bearer "+token)
			if code != 400 || !strings.Contains(body, c.field) {
				t.Fatalf("%s %s %s: %d %.300s, want 400 naming %s", c.method, c.path, c.body, code, body, c.field)
			}
			var e struct {
				Field string `json:"field"`
			}
			if c.path == "/v1/check" && (json.Unmarshal([]byte(body), &e) != nil || e.Field != c.field) {
				t.Fatalf("%s: error %s, want JSON with field %q", c.path, body, c.field)
			}
		})
	}
	// and nothing above changed a pool or set a control
	if _, body := p.do(t, "GET", "/v1/controls", "", "Authorization", "Bearer "+token); strings.Contains(body, `"id"`) {
		t.Fatalf("a refused body set a control: %s", body)
	}
	if _, body := p.do(t, "GET", "/v1/pools", "", "Authorization", "Bearer "+token); !strings.Contains(body, `"capacity":100`) {
		t.Fatalf("a refused body changed the pool: %s", body)
	}
}
