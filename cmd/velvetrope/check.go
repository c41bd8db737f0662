package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/client"
)

// descriptorFlags collects repeated --descriptor values.
type descriptorFlags []client.Descriptor

func (d *descriptorFlags) String() string { return fmt.Sprint(len(*d), " descriptors") }

func (d *descriptorFlags) Set(s string) error {
	desc, err := client.ParseDescriptor(s)
	if err != nil {
		return err
	}
	*d = append(*d, desc)
	return nil
}

// runCheck implements `velvetrope check`: one ShouldRateLimit call to a
// running velvetrope (its gRPC listener). Exit 0 when allowed, 2 when
// denied, 1 on any error, also a domain the service has no rules for;
// the statuses go to stdout either way.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	domain := fs.String("domain", "", "rule domain (required)")
	var descs descriptorFlags
	fs.Var(&descs, "descriptor", "k=v[,k2=v2...]; repeat for several descriptors (at least one)")
	hits := fs.Uint64("hits", 1, "cost of the request")
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC (Envoy rate limit service) address of a velvetrope")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if err := checkCommand.parse(fs, args, stdout); err != nil {
		return checkCommand.exit(err, stderr, 1)
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "velvetrope check: unexpected argument %q\n", fs.Arg(0))
		return 1
	case *domain == "":
		fmt.Fprintln(stderr, "velvetrope check: --domain is required")
		return 1
	case len(descs) == 0:
		fmt.Fprintln(stderr, "velvetrope check: at least one --descriptor k=v is required")
		return 1
	case *hits > math.MaxUint32:
		fmt.Fprintf(stderr, "velvetrope check: --hits: at most %d, got %d\n", uint64(math.MaxUint32), *hits)
		return 1
	}
	c, err := client.DialGRPC(*addr, *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "velvetrope check: %v\n", err)
		return 1
	}
	defer c.Close()
	req := client.Request{Domain: *domain, Descriptors: descs, Hits: uint32(*hits)}
	if *hits == 0 { // the Envoy API reads 0 as 1: a probe is per descriptor
		zero := uint64(0)
		for i := range req.Descriptors {
			req.Descriptors[i].Hits = &zero
		}
	}
	resp, err := c.Check(context.Background(), req)
	if err != nil {
		fmt.Fprintf(stderr, "velvetrope check: %v\n", err)
		return 1
	}
	if resp.UnknownDomain {
		// Envoy's API answers an unknown domain OK; nothing decided it
		known := strings.Join(resp.KnownDomains, ", ")
		if known == "" {
			known = "none"
		}
		fmt.Fprintf(stderr, "velvetrope check: unknown domain %q (known: %s)\n", *domain, known)
		return 1
	}
	verdict := "allow"
	if resp.OverLimit {
		verdict = "deny"
	}
	fmt.Fprintln(stdout, verdict)
	for i, st := range resp.Statuses {
		fmt.Fprintf(stdout, "  [%d] %s\n", i, st)
	}
	if resp.OverLimit {
		return 2
	}
	return 0
}
