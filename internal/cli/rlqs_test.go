package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestRLQSOnTheGRPCPort: velvetrope dev serves Envoy's rate limit quota
// service on its gRPC port, and a stream outlives grpc.call_timeout (a
// proxy holds one for as long as it runs).
func TestRLQSOnTheGRPCPort(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(rules, []byte("domain: envoy\ndescriptors:\n  - key: tenant\n    rlqs: {bucket_keys: [tenant]}\n"+
		"    algorithm: fixed_window\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDev(t, "rules: ["+rules+"]\ngrpc:\n  call_timeout: 500ms\n", env())
	conn, err := grpc.NewClient(d.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	report := func(domain string, allowed uint64) uint32 {
		t.Helper()
		err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: allowed}}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return m.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetMaxTokens()
	}
	if n := report("envoy", 0); n != 10 {
		t.Fatalf("first assignment: %d tokens, want 10", n)
	}
	time.Sleep(time.Second) // past grpc.call_timeout: real time is what the server's deadline counts
	if n := report("", 4); n != 10 {
		t.Fatalf("after 4, a second later: %d tokens, want the same grant of 10 extended (6 left to it)", n)
	}
}
