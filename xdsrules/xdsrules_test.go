package xdsrules

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/rulesync"
)

// controlPlane is go-control-plane's own ADS server over a snapshot cache,
// recording the NACKs it receives.
type controlPlane struct {
	addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	nacks []string
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	cp := &controlPlane{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		if d := req.GetErrorDetail(); d != nil {
			cp.mu.Lock()
			cp.nacks = append(cp.nacks, req.GetResponseNonce()+": "+d.GetMessage())
			cp.mu.Unlock()
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, cp.cache, cb)
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(func() { g.Stop(); cancel() })
	cp.addr = l.Addr().String()
	return cp
}

func (cp *controlPlane) push(t *testing.T, version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		rs[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), "checker-1", snap); err != nil {
		t.Fatal(err)
	}
}

// sawNACK reports whether a NACK's message held want.
func (cp *controlPlane) sawNACK(want string) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, n := range cp.nacks {
		if strings.Contains(n, want) {
			return true
		}
	}
	return false
}

// nackCount is how many NACKs the control plane received.
func (cp *controlPlane) nackCount() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return len(cp.nacks)
}

func shopConfig(n uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "shop-config", Domain: "shop", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n, Name: "per_user"}},
		{Key: "route", Value: "/export", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "tenant", ShadowMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 10}},
		}},
		{Key: "health", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
	}}
}

func limitOf(live *config.Store, domain, id string) int64 {
	for _, r := range live.Load().Rules() {
		if r.Domain == domain && r.ID == id {
			return r.Limit
		}
	}
	return -1
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond) // waiting for the stream's goroutine
	}
}

// TestFollowsAControlPlane: against go-control-plane's server and snapshot
// cache, a snapshot pushed is enforced (limits, nesting, shadow, unlimited
// converted as Envoy's service reads them), a bad one is NACKed with the
// reason and the rules before it stay, and a good one after it is taken.
func TestFollowsAControlPlane(t *testing.T) {
	cp := startControlPlane(t)
	f, err := config.ParseRules("rules/api.yaml", []byte("domain: api\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Compile([]*config.File{f})
	if err != nil {
		t.Fatal(err)
	}
	live := config.NewStore(rs)
	c, err := New(rulesync.NewSources(live, []*config.File{f}), Options{ServerURL: cp.addr, NodeID: "checker-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	if c.Ready() == nil {
		t.Fatal("ready before any update")
	}

	cp.push(t, "v1", shopConfig(5, rlsconfv3.RateLimitUnit_MINUTE))
	waitFor(t, "v1 live", func() bool { return c.Version() == "v1" })
	if got := limitOf(live, "shop", "shop:user"); got != 5 || c.Ready() != nil {
		t.Fatalf("v1: shop:user limit %d, ready %v", got, c.Ready())
	}
	r := live.Load().Match("shop", []config.Entry{{Key: "route", Value: "/export"}, {Key: "tenant", Value: "acme"}})
	if r == nil || r.Limit != 10 || r.Unit != config.Hour || !r.Shadow || live.Load().Match("shop", []config.Entry{{Key: "health", Value: "x"}}) == nil {
		t.Fatalf("nested or unlimited descriptors not converted: %+v", r)
	}
	if limitOf(live, "api", "api:ip") != 5 {
		t.Fatal("the rule file's domain went away")
	}

	// a limit with no unit: refused, with the reason, v1 stays
	cp.push(t, "v2", shopConfig(7, rlsconfv3.RateLimitUnit_UNKNOWN))
	waitFor(t, "v2 NACKed with the configuration and the reason", func() bool { return cp.sawNACK("xds:shop-config:5:18: rate_limit: missing unit") })
	before := cp.nackCount()
	time.Sleep(2500 * time.Millisecond) // real time: a control plane resending the refused version must not make the pair spin
	if n := cp.nackCount() - before; n > 3 {
		t.Fatalf("%d NACKs of one refused version in 2.5 s: the client spins with the control plane", n)
	}
	if c.Version() != "v1" || limitOf(live, "shop", "shop:user") != 5 {
		t.Fatalf("after a refused update: version %q, limit %d", c.Version(), limitOf(live, "shop", "shop:user"))
	}
	// a domain the rule files define: refused too
	clash := shopConfig(5, rlsconfv3.RateLimitUnit_MINUTE)
	clash.Domain = "api"
	cp.push(t, "v3", clash)
	waitFor(t, "v3 NACKed", func() bool { return cp.sawNACK(`domain "api" is already defined in rules/api.yaml`) })

	cp.push(t, "v4", shopConfig(9, rlsconfv3.RateLimitUnit_SECOND))
	waitFor(t, "v4 live", func() bool { return c.Version() == "v4" })
	if got := limitOf(live, "shop", "shop:user"); got != 9 {
		t.Fatalf("v4: limit %d", got)
	}
	if a, rf := c.Counts(); a != 2 || rf != 2 {
		t.Fatalf("accepted %d, refused %d; want 2 and 2", a, rf)
	}
	// an empty snapshot takes the control plane's domains away
	cp.push(t, "v5")
	waitFor(t, "v5 live", func() bool { return c.Version() == "v5" })
	if live.Load().HasDomain("shop") || !live.Load().HasDomain("api") {
		t.Fatal("an empty snapshot: shop should be gone, api kept")
	}
}

// TestNewNeedsAddressAndNode: the two settings are named when missing.
func TestNewNeedsAddressAndNode(t *testing.T) {
	src := rulesync.NewSources(config.NewStore(nil), nil)
	if _, err := New(src, Options{NodeID: "n"}); err == nil || !strings.Contains(err.Error(), "CONFIG_GRPC_XDS_SERVER_URL") {
		t.Fatalf("no address: %v", err)
	}
	if _, err := New(src, Options{ServerURL: "127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "CONFIG_GRPC_XDS_NODE_ID") {
		t.Fatalf("no node: %v", err)
	}
}
