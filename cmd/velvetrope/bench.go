package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/velvetrope/velvetrope/bench/loadgen"
)

// runBench implements `velvetrope bench`: a closed-loop gRPC load
// generator for Envoy's ShouldRateLimit and gubernator's GetRateLimits
// (package loadgen), or with --serve-noop the no-op service that is the
// ceiling of a comparison. Exit 0 on success, 1 on any error, 2 on bad
// flags.
func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC address of the service; several, comma-separated, share the callers round-robin")
	protocol := fs.String("protocol", "envoy", "envoy (ShouldRateLimit) or gubernator (GetRateLimits)")
	callers := fs.Int("callers", 64, "concurrent callers, each with one request in flight")
	conns := fs.Int("conns", 4, "gRPC connections per address, shared by the callers")
	duration := fs.Duration("duration", 10*time.Second, "measured time")
	warmup := fs.Duration("warmup", time.Second, "unmeasured time before it (0: none)")
	requests := fs.Int64("requests", 0, "stop after this many measured requests instead (0: run for --duration)")
	timeout := fs.Duration("timeout", 2*time.Second, "per call")
	keys := fs.Int64("keys", 1000, "distinct descriptor values, used one after another (1: one hot key)")
	prefix := fs.String("key-prefix", "", "prefix of every value (default: one from the clock, so runs do not share keys)")
	domain := fs.String("domain", "bench", "Envoy domain")
	key := fs.String("descriptor-key", "user_id", "Envoy descriptor entry key; gubernator: the limit's name")
	hits := fs.Int64("hits", 1, "cost of each request")
	limit := fs.Int64("limit", 1_000_000_000, "gubernator: the limit each request carries")
	every := fs.Duration("limit-every", time.Second, "gubernator: the limit's duration")
	global := fs.Bool("global", false, "gubernator: GLOBAL behaviour")
	rate := fs.Float64("rate", 0, "pace the run: at most this many requests per second in all (0: closed loop at full speed)")
	label := fs.String("label", "", "name of the row in the table (default: the protocol and address)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	quiet := fs.Bool("quiet", false, "no progress line on stderr")
	noop := fs.String("serve-noop", "", "serve a no-op ShouldRateLimit for --domain (velvetrope's gRPC front answering OK, deciding nothing) on this address until interrupted")
	if err := benchCommand.parse(fs, args, stdout); err != nil {
		return benchCommand.exit(err, stderr, 2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "velvetrope bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *noop != "" {
		lis, err := net.Listen("tcp", *noop)
		if err != nil {
			fmt.Fprintf(stderr, "velvetrope bench: --serve-noop: %v\n", err)
			return 1
		}
		n, err := loadgen.NewNoop(*domain)
		if err != nil {
			fmt.Fprintf(stderr, "velvetrope bench: --serve-noop: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "velvetrope bench: no-op ShouldRateLimit for domain %s on %s\n", *domain, lis.Addr())
		if err := n.Serve(ctx, lis); err != nil {
			fmt.Fprintf(stderr, "velvetrope bench: %v\n", err)
			return 1
		}
		return 0
	}
	cfg := loadgen.Config{Targets: strings.Split(*addr, ","), Protocol: loadgen.Protocol(*protocol), Callers: *callers,
		Conns: *conns, Duration: *duration, Warmup: *warmup, Requests: *requests, Timeout: *timeout, Keys: *keys,
		KeyPrefix: *prefix, Domain: *domain, DescriptorKey: *key, Hits: *hits, Limit: *limit, LimitEvery: *every, Global: *global, Rate: *rate}
	if cfg.Warmup == 0 {
		cfg.Warmup = -1 // none
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "velvetrope bench: %v\n", err)
		return 2
	}
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "velvetrope bench: %v\n", err)
		return 1
	}
	if *label == "" {
		*label = *protocol + " " + *addr
	}
	if *asJSON {
		out := struct {
			Label string `json:"label"`
			loadgen.Result
		}{*label, res}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "velvetrope bench: %v\n", err)
			return 1
		}
		return 0
	}
	printBench(stdout, *label, res)
	return 0
}

// printBench writes one result as an aligned table.
func printBench(w io.Writer, label string, r loadgen.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
	fmt.Fprintln(tw, "system\trequests/s\tp50\tp90\tp99\tp99.9\tmax\trequests\tadmitted\trefused\terrors\t")
	fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t\n", label, r.PerSecond, ms(r.P50), ms(r.P90), ms(r.P99),
		ms(r.P999), ms(r.Max), r.Requests, r.Admitted, r.Refused, r.Errors)
	tw.Flush()
	fmt.Fprintf(w, "%d callers over %d connection(s) per address, %d keys, %.1f s measured\n", r.Callers, r.Conns, r.Keys, r.Elapsed.Seconds())
	if r.FirstErr != "" {
		fmt.Fprintf(w, "first error: %s\n", r.FirstErr)
	}
}
