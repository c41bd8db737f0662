// Package loadgen drives a rate limit service over gRPC with a closed loop
// of callers and reports what it answered and how fast: Envoy's
// ShouldRateLimit (velvetrope, envoy's ratelimit service, any RLS) and
// gubernator's GetRateLimits, so one tool measures every system.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Protocol is the API a target speaks.
type Protocol string

// Protocols.
const (
	Envoy      Protocol = "envoy"      // envoy.service.ratelimit.v3 ShouldRateLimit
	Gubernator Protocol = "gubernator" // pb.gubernator.V1 GetRateLimits
)

// Config is one run. Zero fields take the defaults of [Config.withDefaults].
type Config struct {
	Target   string   // host:port of the gRPC server
	Targets  []string // several servers: callers are spread over them round-robin (Target is then ignored)
	Protocol Protocol
	Callers  int           // concurrent callers, each with one request in flight (64)
	Conns    int           // gRPC connections per target the callers share (4)
	Duration time.Duration // measured time (10 s)
	Warmup   time.Duration // unmeasured time before it (1 s; negative: none)
	Timeout  time.Duration // per call (2 s)
	// Requests, when > 0, stops after this many measured requests instead
	// of after Duration.
	Requests int64

	// Keys is the key spread: requests go to Keys distinct values, one
	// after another (1: one hot key; more keys than requests: every
	// request a key seen once). KeyPrefix starts every value, so runs do
	// not reuse each other's keys (default: a prefix from the clock).
	Keys      int64
	KeyPrefix string

	Domain        string // Envoy: the domain ("bench")
	DescriptorKey string // Envoy: the entry key ("user_id"); gubernator: the limit's name
	Hits          int64  // cost per request (1)
	// Gubernator only: the limit each request carries, its duration, and
	// GLOBAL behaviour instead of the default batching.
	Limit      int64         // (1,000,000,000)
	LimitEvery time.Duration // (1 s)
	Global     bool

	// Rate, when > 0, paces the run: at most Rate requests per second in
	// all (each caller waits for its turn), instead of closed-loop at full
	// speed.
	Rate float64

	// Progress, when set, gets one line per second while the run goes.
	Progress io.Writer
}

func (c Config) withDefaults() Config {
	if c.Protocol == "" {
		c.Protocol = Envoy
	}
	if c.Callers <= 0 {
		c.Callers = 64
	}
	if c.Conns <= 0 {
		c.Conns = 4
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	switch {
	case c.Warmup < 0:
		c.Warmup = 0
	case c.Warmup == 0:
		c.Warmup = time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.Keys <= 0 {
		c.Keys = 1
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-"
	}
	if c.Domain == "" {
		c.Domain = "bench"
	}
	if c.DescriptorKey == "" {
		c.DescriptorKey = "user_id"
	}
	if c.Hits <= 0 {
		c.Hits = 1
	}
	if c.Limit <= 0 {
		c.Limit = 1_000_000_000
	}
	if c.LimitEvery <= 0 {
		c.LimitEvery = time.Second
	}
	if len(c.Targets) == 0 && c.Target != "" {
		c.Targets = []string{c.Target}
	}
	return c
}

// Validate names the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case len(c.Targets) == 0 && c.Target == "":
		return errors.New("loadgen: no target")
	case c.Protocol != "" && c.Protocol != Envoy && c.Protocol != Gubernator:
		return fmt.Errorf("loadgen: protocol %q: want envoy or gubernator", c.Protocol)
	case c.Callers > 100_000 || c.Conns > 10_000:
		return fmt.Errorf("loadgen: %d callers over %d connections is beyond what one process can drive", c.Callers, c.Conns)
	case c.Hits > 1<<32-1:
		return fmt.Errorf("loadgen: hits %d does not fit Envoy's hits_addend", c.Hits)
	}
	return nil
}

// Result is what a run measured (the warm-up left out).
type Result struct {
	Protocol  Protocol      `json:"protocol"`
	Targets   []string      `json:"targets"`
	Callers   int           `json:"callers"`
	Conns     int           `json:"conns"`
	Keys      int64         `json:"keys"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	Requests  uint64        `json:"requests"`
	Admitted  uint64        `json:"admitted"`
	Refused   uint64        `json:"refused"`
	Errors    uint64        `json:"errors"`
	FirstErr  string        `json:"first_error,omitempty"`
	PerSecond float64       `json:"requests_per_second"`
	// Latency quantiles of answered calls (errors included).
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
	// PerTarget counts admissions by target, in Targets' order.
	PerTarget []uint64 `json:"admitted_per_target,omitempty"`
	// Start is when measuring began; AdmittedPerSecond counts admissions
	// by the second of the run they were answered in.
	Start             time.Time `json:"start"`
	AdmittedPerSecond []uint64  `json:"admitted_per_second,omitempty"`
}

// caller is one closed-loop client: its own buffers and histogram.
type caller struct {
	conn    *grpc.ClientConn
	target  int
	req     []byte
	resp    []byte
	key     []byte
	hist    Histogram
	n, errs atomic.Uint64 // read by the progress line while the run goes
	ok, no  uint64
	perSec  []uint64 // admissions by second of the run
	lastErr error
}

// Run drives cfg.Callers closed-loop callers for the warm-up and then the
// measured duration (or request count), and returns what they measured.
// It returns an error when the target cannot be dialled or answered no
// call at all.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	conns := make([][]*grpc.ClientConn, len(cfg.Targets))
	defer func() {
		for _, cs := range conns {
			for _, c := range cs {
				c.Close()
			}
		}
	}()
	for t, addr := range cfg.Targets {
		for range cfg.Conns {
			// one ClientConn per connection: each has its own transport
			c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
			if err != nil {
				return Result{}, fmt.Errorf("loadgen: dial %s: %w", addr, err)
			}
			c.Connect()
			conns[t] = append(conns[t], c)
		}
	}
	method := envoyMethod
	if cfg.Protocol == Gubernator {
		method = gubernatorMethod
	}
	callers := make([]*caller, cfg.Callers)
	for i := range callers {
		t := i % len(cfg.Targets)
		callers[i] = &caller{conn: conns[t][(i/len(cfg.Targets))%cfg.Conns], target: t,
			req: make([]byte, 0, 256), resp: make([]byte, 0, 256), key: make([]byte, 0, 64)}
	}

	var next atomic.Int64    // the key sequence
	var startNs atomic.Int64 // when measuring began
	var turns chan struct{}  // paced runs: one token a request
	if cfg.Rate > 0 {
		turns = make(chan struct{})
		pctx, pstop := context.WithCancel(ctx)
		defer pstop()
		go func() {
			t := time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
			defer t.Stop()
			for {
				select {
				case <-t.C:
					select {
					case turns <- struct{}{}:
					case <-pctx.Done():
						return
					default: // every caller busy: the turn is lost, as an open loop would queue it
					}
				case <-pctx.Done():
					return
				}
			}
		}()
	}
	var issued atomic.Int64 // measured requests started (with cfg.Requests)
	var measuring atomic.Bool
	var stop atomic.Bool
	var done sync.WaitGroup
	one := func(c *caller) bool {
		measured := measuring.Load() // a call counts when it started measured
		if measured && cfg.Requests > 0 && issued.Add(1) > cfg.Requests {
			return false
		}
		if turns != nil {
			select {
			case <-turns:
			case <-ctx.Done():
				return false
			}
			if stop.Load() {
				return false
			}
		}
		k := next.Add(1) % cfg.Keys
		c.key = strconv.AppendInt(append(c.key[:0], cfg.KeyPrefix...), k, 10)
		if cfg.Protocol == Gubernator {
			behavior := uint64(gubernatorBatching)
			if cfg.Global {
				behavior = gubernatorGlobal
			}
			c.req = appendGubernator(c.req[:0], cfg.DescriptorKey, c.key, cfg.Hits, cfg.Limit, cfg.LimitEvery.Milliseconds(), behavior)
		} else {
			c.req = appendEnvoy(c.req[:0], cfg.Domain, cfg.DescriptorKey, c.key, uint32(cfg.Hits))
		}
		cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		start := time.Now()
		err := c.conn.Invoke(cctx, method, &c.req, &c.resp)
		lat := time.Since(start)
		cancel()
		var v verdict
		if err == nil {
			if cfg.Protocol == Gubernator {
				v, err = gubernatorVerdict(c.resp)
			} else {
				v, err = envoyVerdict(c.resp)
			}
		}
		if !measured {
			return err == nil || ctx.Err() == nil
		}
		c.n.Add(1)
		c.hist.Record(lat)
		switch {
		case err != nil:
			c.errs.Add(1)
			if c.lastErr == nil {
				c.lastErr = err
			}
			if ctx.Err() != nil {
				return false
			}
		case v == admitted:
			c.ok++
			if sec := int((time.Now().UnixNano() - startNs.Load()) / int64(time.Second)); sec >= 0 && sec < 1<<16 {
				for len(c.perSec) <= sec {
					c.perSec = append(c.perSec, 0)
				}
				c.perSec[sec]++
			}
		default:
			c.no++
		}
		return true
	}
	if cfg.Warmup == 0 { // no warm-up: every call is measured, the first included
		startNs.Store(time.Now().UnixNano())
		measuring.Store(true)
	}
	for _, c := range callers {
		done.Add(1)
		go func() {
			defer done.Done()
			for !stop.Load() {
				if !one(c) {
					return
				}
			}
		}()
	}

	progress := func(elapsed time.Duration) {}
	if cfg.Progress != nil {
		progress = func(elapsed time.Duration) {
			var n, errs uint64
			for _, c := range callers {
				n += c.n.Load()
				errs += c.errs.Load()
			}
			fmt.Fprintf(cfg.Progress, "bench: %5.1fs %9.0f req/s, %d requests, %d errors\n",
				elapsed.Seconds(), float64(n)/max(elapsed.Seconds(), 1e-9), n, errs)
		}
	}
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := wait(cfg.Warmup); err != nil {
		stop.Store(true)
		done.Wait()
		return Result{}, err
	}
	start := time.Now()
	if cfg.Warmup > 0 {
		startNs.Store(start.UnixNano())
		measuring.Store(true)
	} else {
		start = time.Unix(0, startNs.Load())
	}
	tick := time.NewTicker(time.Second)
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	end := time.NewTimer(cfg.Duration)
	if cfg.Requests > 0 {
		end.Stop() // the request count ends the run
	}
loop:
	for {
		select {
		case <-tick.C:
			progress(time.Since(start))
		case <-end.C:
			break loop
		case <-finished:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	tick.Stop()
	stop.Store(true)
	<-finished
	elapsed := time.Since(start)

	res := Result{Protocol: cfg.Protocol, Targets: cfg.Targets, Callers: cfg.Callers, Conns: cfg.Conns, Keys: cfg.Keys,
		Elapsed: elapsed, PerTarget: make([]uint64, len(cfg.Targets)), Start: start}
	var h Histogram
	for _, c := range callers {
		h.Merge(&c.hist)
		res.Requests += c.n.Load()
		res.Admitted += c.ok
		res.Refused += c.no
		res.Errors += c.errs.Load()
		res.PerTarget[c.target] += c.ok
		for i, n := range c.perSec {
			for len(res.AdmittedPerSecond) <= i {
				res.AdmittedPerSecond = append(res.AdmittedPerSecond, 0)
			}
			res.AdmittedPerSecond[i] += n
		}
		if c.lastErr != nil && res.FirstErr == "" {
			res.FirstErr = c.lastErr.Error()
		}
	}
	res.PerSecond = float64(res.Requests) / elapsed.Seconds()
	res.P50, res.P90, res.P99, res.P999, res.Max = h.Quantile(0.5), h.Quantile(0.9), h.Quantile(0.99), h.Quantile(0.999), h.Max()
	if res.Requests == 0 || res.Errors == res.Requests {
		return res, fmt.Errorf("loadgen: no call to %v succeeded: %s", cfg.Targets, res.FirstErr)
	}
	return res, nil
}
