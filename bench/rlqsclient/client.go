// Package rlqsclient is a rate limit quota (RLQS) client as Envoy's
// rate_limit_quota filter documents it, for measuring the server: each
// request is decided locally from its bucket's assignment (a token bucket,
// or a blanket rule); usage is reported every interval, and at once for a
// bucket seen for the first time or whose assignment changed; an
// assignment unlike the current one starts full, one like it only extends
// its time to live; an expired assignment is reused for a while
// (reuse_last_assignment), then the fallback decides; an abandoned bucket
// is forgotten.
package rlqsclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Options configure a Client.
type Options struct {
	Domain   string
	Interval time.Duration // reporting interval (default 1 s)
	// DenyWithoutAssignment refuses a bucket's requests until its first
	// assignment (no_assignment_behavior DENY_ALL); false admits them
	// (ALLOW_ALL, Envoy's default).
	DenyWithoutAssignment bool
	// ReuseExpired is how long an expired assignment is still applied
	// (reuse_last_assignment with expired_assignment_behavior_timeout);
	// then the no-assignment behavior decides. Default 30 s.
	ReuseExpired time.Duration
}

// Client is one proxy's filter on one stream.
type Client struct {
	opts   Options
	conn   *grpc.ClientConn
	stream grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	cancel context.CancelFunc
	sendMu sync.Mutex
	mu     sync.Mutex
	bkts   map[string]*bucket
	first  bool // the domain is sent once, in the first report
	done   chan struct{}
	err    error
	// Assignments counts the assignments received.
	Assignments int
}

type bucket struct {
	id              map[string]string
	strategy        *typev3.RateLimitStrategy
	expires         time.Time
	tokens, max     float64
	perFill         float64
	fill            time.Duration
	at              time.Time // tokens are as of at
	allowed, denied uint64
	reported        time.Time
}

// Dial opens a stream to addr.
func Dial(addr string, opts Options) (*Client, error) {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.ReuseExpired <= 0 {
		opts.ReuseExpired = 30 * time.Second
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	c := &Client{opts: opts, conn: conn, stream: s, cancel: cancel, bkts: map[string]*bucket{}, first: true, done: make(chan struct{})}
	go c.receive()
	go c.reportEvery()
	return c, nil
}

// Close reports what is left to report and ends the stream (as a proxy
// that stops).
func (c *Client) Close() error {
	c.report(time.Now(), "")
	c.sendMu.Lock()
	_ = c.stream.CloseSend()
	c.sendMu.Unlock()
	select { // the server answers the last report, then sees the end
	case <-c.done:
	case <-time.After(time.Second):
	}
	c.cancel()
	<-c.done
	return c.conn.Close()
}

// Err is why the stream ended, if it did.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func key(b map[string]string) string { return fmt.Sprint(b) } // fmt sorts map keys

// Allow decides one request of bucket b locally.
func (c *Client) Allow(b map[string]string) bool {
	now := time.Now()
	c.mu.Lock()
	k := key(b)
	bk := c.bkts[k]
	fresh := bk == nil
	if fresh {
		bk = &bucket{id: b, reported: now}
		c.bkts[k] = bk
	}
	ok := c.decide(bk, now)
	if ok {
		bk.allowed++
	} else {
		bk.denied++
	}
	c.mu.Unlock()
	if fresh { // a new bucket is reported at once: it subscribes to its assignments
		c.report(now, k)
	}
	return ok
}

// decide applies bk's assignment (requires c.mu).
func (c *Client) decide(bk *bucket, now time.Time) bool {
	switch {
	case bk.strategy == nil, now.After(bk.expires.Add(c.opts.ReuseExpired)):
		return !c.opts.DenyWithoutAssignment
	case bk.strategy.GetTokenBucket() != nil:
		if bk.fill > 0 {
			bk.tokens = min(bk.max, bk.tokens+float64(now.Sub(bk.at))/float64(bk.fill)*bk.perFill)
		}
		bk.at = now
		if bk.tokens >= 1 {
			bk.tokens--
			return true
		}
		return false
	case bk.strategy.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		return false
	}
	return true // ALLOW_ALL, or a strategy this client does not know
}

// receive applies the server's actions until the stream ends.
func (c *Client) receive() {
	defer close(c.done)
	for {
		m, err := c.stream.Recv()
		if err != nil {
			c.mu.Lock()
			if !errors.Is(err, context.Canceled) {
				c.err = err
			}
			c.mu.Unlock()
			return
		}
		var changed []string
		now := time.Now()
		c.mu.Lock()
		c.Assignments += len(m.BucketAction)
		for _, a := range m.BucketAction {
			k := key(a.GetBucketId().GetBucket())
			bk := c.bkts[k]
			if bk == nil {
				continue
			}
			if a.GetAbandonAction() != nil {
				delete(c.bkts, k)
				continue
			}
			qa := a.GetQuotaAssignmentAction()
			ttl := qa.GetAssignmentTimeToLive().AsDuration()
			if qa.GetAssignmentTimeToLive() == nil {
				ttl = 100 * 365 * 24 * time.Hour
			}
			bk.expires = now.Add(ttl)
			if proto.Equal(qa.GetRateLimitStrategy(), bk.strategy) {
				continue // the same: its time to live is extended
			}
			bk.strategy = qa.GetRateLimitStrategy()
			if tb := bk.strategy.GetTokenBucket(); tb != nil {
				bk.max, bk.tokens, bk.at = float64(tb.GetMaxTokens()), float64(tb.GetMaxTokens()), now
				bk.perFill, bk.fill = float64(tb.GetTokensPerFill().GetValue()), tb.GetFillInterval().AsDuration()
				if tb.GetTokensPerFill() == nil {
					bk.perFill = 1
				}
			}
			changed = append(changed, k)
		}
		c.mu.Unlock()
		for _, k := range changed { // a new assignment: the old one's usage is reported at once
			c.report(now, k)
		}
	}
}

func (c *Client) reportEvery() {
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			c.report(now, "")
		}
	}
}

// report sends the usage of bucket only ("": of every bucket) since its
// last report.
func (c *Client) report(now time.Time, only string) {
	msg := &rlqsv3.RateLimitQuotaUsageReports{}
	c.mu.Lock()
	if c.first {
		msg.Domain, c.first = c.opts.Domain, false
	}
	for k, bk := range c.bkts {
		if only != "" && k != only {
			continue
		}
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqsv3.BucketId{Bucket: bk.id}, TimeElapsed: durationpb.New(max(now.Sub(bk.reported), 0)),
			NumRequestsAllowed: bk.allowed, NumRequestsDenied: bk.denied})
		bk.allowed, bk.denied, bk.reported = 0, 0, now
	}
	c.mu.Unlock()
	if len(msg.BucketQuotaUsages) == 0 && msg.Domain == "" {
		return
	}
	c.sendMu.Lock()
	err := c.stream.Send(msg)
	c.sendMu.Unlock()
	if err != nil {
		c.mu.Lock()
		if c.err == nil && !errors.Is(err, context.Canceled) {
			c.err = err
		}
		c.mu.Unlock()
	}
}
