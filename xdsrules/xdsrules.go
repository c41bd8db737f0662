// Package xdsrules takes rules from an xDS control plane as Envoy's
// ratelimit service does (its CONFIG_TYPE=GRPC_XDS_SOTW): one aggregated
// discovery stream, state of the world, of
// ratelimit.config.ratelimit.v3.RateLimitConfig resources — what Envoy
// Gateway serves the rate limit service it deploys. Each update is
// converted to rule files, compiled with the process's other rules and
// swapped in whole, then acknowledged; an update that does not compile is
// refused (NACK) with the reason and the rules before it stay.
package xdsrules

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/rulesync"
)

// TypeURL is the resource type the stream asks for.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Options are a Client's settings.
type Options struct {
	// ServerURL is the control plane's host:port (CONFIG_GRPC_XDS_SERVER_URL).
	ServerURL string
	// NodeID names this process to the control plane (CONFIG_GRPC_XDS_NODE_ID).
	NodeID string
	// TLS, when set, secures the stream (nil: plaintext).
	TLS *tls.Config
	// Logger takes updates taken and refused, and stream errors.
	Logger *slog.Logger
	// RetryMin and RetryMax bound the wait before a lost stream is opened
	// again (defaults 100 ms and 10 s, doubling).
	RetryMin, RetryMax time.Duration
}

// Client follows one control plane. Safe for concurrent use.
type Client struct {
	src  *rulesync.Sources
	opts Options
	conn *grpc.ClientConn

	mu      sync.Mutex
	version string // the version last accepted ("": none yet)
	lastErr string // why the last update was refused

	accepted, refused atomic.Int64
	cancel            context.CancelFunc
	done              chan struct{}
}

// New returns a Client feeding src; it connects at Start.
func New(src *rulesync.Sources, opts Options) (*Client, error) {
	if opts.ServerURL == "" {
		return nil, errors.New("xdsrules: no control plane address (CONFIG_GRPC_XDS_SERVER_URL)")
	}
	if opts.NodeID == "" {
		return nil, errors.New("xdsrules: no node id (CONFIG_GRPC_XDS_NODE_ID)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = 100 * time.Millisecond
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(10*time.Second, opts.RetryMin)
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	conn, err := grpc.NewClient(opts.ServerURL, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("xdsrules: %s: %w", opts.ServerURL, err)
	}
	return &Client{src: src, opts: opts, conn: conn}, nil
}

// Start follows the control plane in the background until Stop; the rules
// arrive with its first update (Ready says whether one has).
func (c *Client) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go c.run(ctx)
	return nil
}

// Stop ends the stream and waits for it, or for ctx.
func (c *Client) Stop(ctx context.Context) error {
	if c.cancel == nil {
		return c.conn.Close()
	}
	c.cancel()
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.conn.Close()
}

// Version is the version last accepted ("" before the first update).
func (c *Client) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Counts are the updates accepted and refused since start.
func (c *Client) Counts() (accepted, refused int64) { return c.accepted.Load(), c.refused.Load() }

// Ready says why the control plane's rules are not live yet.
func (c *Client) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.version != "":
		return nil
	case c.lastErr != "":
		return fmt.Errorf("no xDS update accepted yet: the last was refused: %s", c.lastErr)
	}
	return fmt.Errorf("no xDS update from %s yet", c.opts.ServerURL)
}

func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	wait := c.opts.RetryMin
	for {
		began := time.Now()
		err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > c.opts.RetryMax {
			wait = c.opts.RetryMin // the stream lived: start over
		}
		c.opts.Logger.Warn("xDS stream ended; opening it again", "server", c.opts.ServerURL, "error", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, c.opts.RetryMax)
	}
}

// stream runs one ADS stream until it fails.
func (c *Client) stream(ctx context.Context) error {
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &corev3.Node{Id: c.opts.NodeID, UserAgentName: "velvetrope"}
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: TypeURL, VersionInfo: c.Version()}); err != nil {
		return err
	}
	// A control plane may send a refused version again at once (go-control-
	// plane's cache does: the NACK names an older version). The same
	// version refused again is answered after a pause that doubles, so
	// the pair does not spin, and it is logged and counted once.
	refusedVersion, pause := "", time.Duration(0)
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		req := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		if err := c.take(resp); err != nil {
			if resp.GetVersionInfo() == refusedVersion {
				pause = min(max(2*pause, time.Second), c.opts.RetryMax)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(pause):
				}
			} else {
				refusedVersion, pause = resp.GetVersionInfo(), 0
				c.refused.Add(1)
				c.opts.Logger.Error("xDS update refused; the rules before it stay", "version", resp.GetVersionInfo(), "error", err)
			}
			c.mu.Lock()
			c.lastErr = err.Error()
			req.VersionInfo = c.version
			c.mu.Unlock()
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			refusedVersion, pause = "", 0
			c.accepted.Add(1)
			c.opts.Logger.Info("xDS update live", "version", resp.GetVersionInfo(), "configurations", len(resp.GetResources()))
			c.mu.Lock()
			c.version, c.lastErr = resp.GetVersionInfo(), ""
			req.VersionInfo = c.version
			c.mu.Unlock()
		}
		if err := s.Send(req); err != nil {
			return err
		}
	}
}

// take converts an update's configurations and makes them live.
func (c *Client) take(resp *discoveryv3.DiscoveryResponse) error {
	if resp.GetTypeUrl() != TypeURL {
		return fmt.Errorf("type %q: this stream asks for %s only", resp.GetTypeUrl(), TypeURL)
	}
	files := make([]*config.File, 0, len(resp.GetResources()))
	var errs []string
	for i, res := range resp.GetResources() {
		var cfg rlsconfv3.RateLimitConfig
		if err := res.UnmarshalTo(&cfg); err != nil {
			errs = append(errs, fmt.Sprintf("resource %d: %v", i, err))
			continue
		}
		f, err := File(&cfg)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		files = append(files, f)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return c.src.SetXDS(files)
}

// File converts one RateLimitConfig to a rule file named xds:<name>, the
// way Envoy's service reads it: errors name the configuration and the
// position in its rule file form.
func File(cfg *rlsconfv3.RateLimitConfig) (*config.File, error) {
	doc := map[string]any{"domain": cfg.GetDomain(), "descriptors": descriptors(cfg.GetDescriptors())}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return nil, err
	}
	name := cfg.GetName()
	if name == "" {
		name = cfg.GetDomain()
	}
	f, err := config.ParseRules("xds:"+name, b)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func descriptors(ds []*rlsconfv3.RateLimitDescriptor) []any {
	out := make([]any, 0, len(ds))
	for _, d := range ds {
		m := map[string]any{"key": d.GetKey()}
		if d.GetValue() != "" {
			m["value"] = d.GetValue()
		}
		if p := d.GetRateLimit(); p != nil {
			rl := map[string]any{}
			if p.GetUnlimited() {
				rl["unlimited"] = true
			} else {
				if p.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
					rl["unit"] = strings.ToLower(p.GetUnit().String())
				}
				rl["requests_per_unit"] = p.GetRequestsPerUnit()
			}
			if p.GetName() != "" {
				rl["name"] = p.GetName()
			}
			if rs := p.GetReplaces(); len(rs) > 0 {
				var names []any
				for _, r := range rs {
					names = append(names, map[string]any{"name": r.GetName()})
				}
				rl["replaces"] = names
			}
			m["rate_limit"] = rl
		}
		if d.GetShadowMode() {
			m["shadow_mode"] = true
		}
		if d.GetDetailedMetric() {
			m["detailed_metric"] = true
		}
		if len(d.GetDescriptors()) > 0 {
			m["descriptors"] = descriptors(d.GetDescriptors())
		}
		out = append(out, m)
	}
	return out
}
