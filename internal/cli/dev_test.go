package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// TestCheckUnknownDomainExits1: Envoy's API answers a domain without
// rules OK; `velvetrope check` says so and exits 1 instead of printing
// "allow (no limit)" with exit 0. A known domain still exits 0.
func TestCheckUnknownDomainExits1(t *testing.T) {
	d := startDev(t, "", env())
	cases := []struct {
		domain string
		code   int
		stdout string
		stderr string
	}{
		{"nope", 1, "", `velvetrope check: unknown domain "nope" (known: api)` + "\n"},
		{"api", 0, "allow\n  [0] allow (no limit)\n", ""},
	}
	for i, c := range cases {
		r := runBin(t, env(), "check", "--addr", d.GRPC, "--domain", c.domain, "--descriptor", "nothing=here")
		if r.code != c.code || r.stdout != c.stdout || r.stderr != c.stderr {
			t.Fatalf("step %d (--domain %s): exit %d, stdout %q, stderr %q; want %d, %q, %q", i, c.domain, r.code, r.stdout, r.stderr,
				c.code, c.stdout, c.stderr)
		}
	}
}

// TestCheckRoundsDurations: a reset is printed rounded (335ms, 3.3s),
// not to the nanosecond (335.962002ms). user_id is a token bucket of 100
// a minute: after a hit and a pause its reset is no round number.
func TestCheckRoundsDurations(t *testing.T) {
	d := startDev(t, "", env())
	reset := regexp.MustCompile(`reset=(\S+)`)
	cases := []struct {
		hits string
		want *regexp.Regexp // what the reset must look like
	}{
		{"1", nil},                                   // 600ms exactly: no test of rounding yet
		{"0", regexp.MustCompile(`^\d{1,3}ms$`)},     // below a second: whole milliseconds
		{"5", regexp.MustCompile(`^\d\.\ds$|^\ds$`)}, // 1 s to 1 min: tenths of a second
	}
	for i, c := range cases {
		r := runBin(t, env(), "check", "--addr", d.GRPC, "--domain", "api", "--descriptor", "user_id=rounding", "--hits", c.hits)
		m := reset.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("step %d: exit %d, stdout %q, stderr %q", i, r.code, r.stdout, r.stderr)
		}
		if c.want != nil && !c.want.MatchString(m[1]) {
			t.Fatalf("step %d: reset=%s, want it rounded (%s)", i, m[1], c.want)
		}
		// the next step's reset is its own, not a round multiple of the
		// bucket's 600ms (the clock moved by a part of it)
		time.Sleep(137 * time.Millisecond)
	}
}

// TestDevBannerAdminTokenWorks: a fresh dev (no admin.token) generates
// one, and the banner's admin example works as printed; without the
// token the endpoint refuses (401), so the token is what opened it.
func TestDevBannerAdminTokenWorks(t *testing.T) {
	d := startDev(t, "", env())
	line := bannerLine(t, d.banner(), "/v1/controls\n")
	m := regexp.MustCompile(`^curl -s -H "Authorization: Bearer ([A-Z2-7]{26})" (http://\S+/v1/controls)$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the banner's admin example %q is not a curl with a generated bearer token; banner:\n%s", line, d.banner())
	}
	token, url := m[1], m[2]
	get := func(auth string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("Bearer " + token); code != 200 || !strings.Contains(body, `"controls"`) {
		t.Fatalf("GET /v1/controls with the banner's token: %d %s", code, body)
	}
	if code, body := get(""); code != 401 {
		t.Fatalf("GET /v1/controls without a token: %d %s, want 401", code, body)
	}
	if exp := bannerLine(t, d.banner(), "export VELVETROPE_ADMIN_TOKEN="); exp != "export VELVETROPE_ADMIN_TOKEN="+token+
		"   # the docs' admin examples read it; a dev started with it keeps it" {
		t.Fatalf("export line %q", exp)
	}
	if strings.Contains(d.logs(), token) {
		t.Fatalf("the token is in the log:\n%s", d.logs())
	}

	// an operator's own token is used, and not echoed
	own := startDev(t, "", env("VELVETROPE_ADMIN_TOKEN=operators-own"))
	if strings.Contains(own.banner(), "operators-own") ||
		bannerLine(t, own.banner(), "/v1/controls\n") != `curl -s -H "Authorization: Bearer $VELVETROPE_ADMIN_TOKEN" http://`+own.HTTP+"/v1/controls" {
		t.Fatalf("banner with the operator's token:\n%s", own.banner())
	}
	url = "http://" + own.HTTP + "/v1/controls"
	if code, body := get("Bearer operators-own"); code != 200 {
		t.Fatalf("GET /v1/controls with the operator's token: %d %s", code, body)
	}
}

// reflectionClient lists services and fetches the files that define a
// symbol over gRPC server reflection (v1), as grpcurl does.
type reflectionClient struct {
	stream grpc.BidiStreamingClient[reflectionpb.ServerReflectionRequest, reflectionpb.ServerReflectionResponse]
}

func newReflectionClient(t *testing.T, conn *grpc.ClientConn) (*reflectionClient, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	s, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	return &reflectionClient{s}, nil
}

func (c *reflectionClient) ask(req *reflectionpb.ServerReflectionRequest) (*reflectionpb.ServerReflectionResponse, error) {
	if err := c.stream.Send(req); err != nil {
		if errors.Is(err, io.EOF) {
			// the server ended the stream (Unimplemented): Send says only
			// EOF, Recv says why (seen under load in make test)
			_, err = c.stream.Recv()
		}
		return nil, err
	}
	return c.stream.Recv()
}

// TestReflectionServesTheEnvoyAPI: with nothing but reflection, a client
// finds RateLimitService, resolves ShouldRateLimit's messages from the
// files the server sends (none compiled into this test), encodes the
// banner's grpcurl request with them and gets dev's answer: what
// `grpcurl -plaintext -d '...' ADDR envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
// does. The banner's line needs nothing else (no -import-path, no -proto).
func TestReflectionServesTheEnvoyAPI(t *testing.T) {
	d := startDev(t, "", env())
	hint := bannerLine(t, d.banner(), "grpcurl ")
	m := regexp.MustCompile(`^grpcurl -plaintext -d '([^']+)' (\S+) ([\w.]+)/(\w+)$`).FindStringSubmatch(hint)
	if m == nil {
		t.Fatalf("the banner's grpcurl line %q is not 'grpcurl -plaintext -d JSON ADDR SERVICE/METHOD'", hint)
	}
	body, addr, service, method := m[1], m[2], m[3], m[4]
	if addr != d.GRPC {
		t.Fatalf("the grpcurl line asks %s, dev listens on %s", addr, d.GRPC)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, err := newReflectionClient(t, conn)
	if err != nil {
		t.Fatal(err)
	}

	// grpcurl ADDR list
	resp, err := rc.ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if !strings.Contains(strings.Join(names, " "), service) {
		t.Fatalf("reflection lists %v, not %s", names, service)
	}

	js := reflectInvoke(t, rc, conn, context.Background(), service, method, body)
	var got struct {
		OverallCode string `json:"overallCode"`
		Statuses    []struct {
			CurrentLimit struct {
				RequestsPerUnit int    `json:"requestsPerUnit"`
				Unit            string `json:"unit"`
			} `json:"currentLimit"`
			LimitRemaining int `json:"limitRemaining"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if got.OverallCode != "OK" || len(got.Statuses) != 1 || got.Statuses[0].CurrentLimit.RequestsPerUnit != 100 ||
		got.Statuses[0].CurrentLimit.Unit != "MINUTE" || got.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("answer %s, want OK with user_id's 100/minute, 99 remaining", js)
	}
	if _, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service)); err == nil {
		t.Fatal("this test links the Envoy descriptors itself: it would not show that reflection serves them")
	}
}

// reflectInvoke calls SERVICE/METHOD with body (protojson) through what
// server reflection alone tells of it, as grpcurl does, and returns the
// answer as protojson.
func reflectInvoke(t *testing.T, rc *reflectionClient, conn *grpc.ClientConn, ctx context.Context, service, method, body string) []byte {
	t.Helper()
	// grpcurl ADDR describe SERVICE: the files defining it, with their imports
	resp, err := rc.ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: service}})
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(raw, fd); err != nil {
			t.Fatal(err)
		}
		set.File = append(set.File, fd)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("the reflected files do not resolve (%d sent): %v", len(set.File), err)
	}
	desc, err := files.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		t.Fatal(err)
	}
	sd, ok := desc.(protoreflect.ServiceDescriptor)
	if !ok {
		t.Fatalf("%s is a %T", service, desc)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		t.Fatalf("%s has no method %s", service, method)
	}

	// grpcurl -d BODY ADDR SERVICE/METHOD
	types := dynamicpb.NewTypes(files)
	in, out := dynamicpb.NewMessage(md.Input()), dynamicpb.NewMessage(md.Output())
	if err := (protojson.UnmarshalOptions{Resolver: types}).Unmarshal([]byte(body), in); err != nil {
		t.Fatalf("the banner's request %s does not encode as %s: %v", body, md.Input().FullName(), err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, "/"+service+"/"+method, in, out); err != nil {
		t.Fatalf("%s/%s: %v", service, method, err)
	}
	js, err := protojson.MarshalOptions{Resolver: types}.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestReflectionServesTheChargeService: velvetrope.v1.Charges is listed
// and described by reflection, so envoy.md's grpcurl charge runs as
// written: a charge past the limit answers OK with nothing remaining.
func TestReflectionServesTheChargeService(t *testing.T) {
	d := startDev(t, "", env())
	conn, err := grpc.NewClient(d.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "velvetrope-request-id", "resp-81")
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user_id","value":"priya"}]}],"hitsAddend":250}`
	for range 2 { // the retry is counted once: the same answer
		rc, err := newReflectionClient(t, conn) // a stream sends each file once: grpcurl's first call
		if err != nil {
			t.Fatal(err)
		}
		js := reflectInvoke(t, rc, conn, ctx, "velvetrope.v1.Charges", "Charge", body)
		if !strings.Contains(string(js), `"overallCode":"OK"`) || strings.Contains(string(js), "limitRemaining") {
			t.Fatalf("charge answered %s, want OK with nothing remaining (limitRemaining 0 is left out)", js)
		}
	}
}

// TestReflectionOff: grpc.reflection: false turns it off (the call is
// Unimplemented, as for a server without it) and the banner shows no
// grpcurl line that would fail.
func TestReflectionOff(t *testing.T) {
	d := startDev(t, "grpc:\n  reflection: false\n", env())
	conn, err := grpc.NewClient(d.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, err := newReflectionClient(t, conn)
	if err == nil {
		_, err = rc.ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("list services with grpc.reflection: false: %v, want Unimplemented", err)
	}
	if strings.Contains(d.banner(), "grpcurl") || !strings.Contains(d.banner(), "server reflection off") {
		t.Fatalf("banner:\n%s", d.banner())
	}
}
