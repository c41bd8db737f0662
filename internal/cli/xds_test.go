package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// TestDevFollowsAnXDSControlPlane: velvetrope dev started with Envoy's
// ratelimit service's variables enforces what go-control-plane's server
// serves, and keeps it when the next snapshot is refused.
func TestDevFollowsAnXDSControlPlane(t *testing.T) {
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, cache, nil))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	defer g.Stop()
	push := func(version string, unit rlsconfv3.RateLimitUnit) {
		t.Helper()
		cfg := &rlsconfv3.RateLimitConfig{Name: "gw", Domain: "gw", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: 2}}}}
		snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {cfg}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.SetSnapshot(ctx, "dev-1", snap); err != nil {
			t.Fatal(err)
		}
	}
	push("1", rlsconfv3.RateLimitUnit_HOUR)
	d := startDev(t, "", env("CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+l.Addr().String(), "CONFIG_GRPC_XDS_NODE_ID=dev-1"))
	check := func() string {
		resp, err := http.Post("http://"+d.HTTP+"/v1/check", "application/json",
			strings.NewReader(`{"domain":"gw","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(check(), `"rule":"gw:user"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the control plane's domain not enforced 20 s after start\n%s", d.logs())
		}
		time.Sleep(50 * time.Millisecond) // waiting for a real process
	}
	// the probe above was the first hit: one more is allowed, then denied
	if a, b := check(), check(); !strings.Contains(a, `"decision":"allow"`) || !strings.Contains(b, `"decision":"deny"`) {
		t.Fatalf("2 an hour: %s then %s", a, b)
	}
	push("2", rlsconfv3.RateLimitUnit_UNKNOWN) // no unit: refused
	deadline = time.Now().Add(20 * time.Second)
	for !strings.Contains(metrics(t, d.HTTP), "velvetrope_xds_updates_refused_total 1") {
		if time.Now().After(deadline) {
			t.Fatalf("the bad snapshot not refused within 20 s\n%s", d.logs())
		}
		time.Sleep(50 * time.Millisecond) // waiting for a real process
	}
	if b := check(); !strings.Contains(b, `"decision":"deny"`) || !strings.Contains(b, `"rule":"gw:user"`) {
		t.Fatalf("after a refused update the rules before it stay: %s", b)
	}
	if !strings.Contains(d.logs(), "rate_limit: missing unit") {
		t.Fatalf("the refusal's reason is not logged:\n%s", d.logs())
	}
}

func metrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
