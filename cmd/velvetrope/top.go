package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/client"
)

// runTop implements `velvetrope top`: the most denied keys of a running
// velvetrope (its HTTP listener), as an aligned table or, with --json, as
// the service answered. Exit 0 on success, 1 on any error.
func runTop(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	window := fs.String("window", "1h", "how far back: 15m, 6h, 7d (1m to the service's analytics.max_window, 7d by default)")
	domain := fs.String("domain", "", "only this domain")
	rule := fs.String("rule", "", "only this rule id")
	limit := fs.Int("limit", 10, "keys to list (1 to 1000)")
	addr := fs.String("addr", "127.0.0.1:8080", "HTTP address of a velvetrope checker or dev")
	asJSON := fs.Bool("json", false, "print the service's JSON answer")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	token := fs.String("token", os.Getenv("VELVETROPE_ANALYTICS_TOKEN"), "analytics token, when the service requires one (default $VELVETROPE_ANALYTICS_TOKEN)")
	if err := topCommand.parse(fs, args, stdout); err != nil {
		return topCommand.exit(err, stderr, 1)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "velvetrope top: unexpected argument %q\n", fs.Arg(0))
		return 1
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	top, err := client.NewHTTP(base, nil, *timeout).TopDenied(ctx, client.TopQuery{Window: *window, Domain: *domain, Rule: *rule, Limit: *limit, Token: *token})
	if err != nil {
		fmt.Fprintf(stderr, "velvetrope top: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(top)
		return 0
	}
	printTop(stdout, top)
	return 0
}

// printTop writes the keys as a table: counts right-aligned, names
// left-aligned, columns as wide as their widest cell.
func printTop(w io.Writer, top client.TopDenied) {
	if len(top.Keys) == 0 {
		fmt.Fprintf(w, "no denied keys in the last %s\n", top.Window)
		return
	}
	rows := [][]string{{"DENIED", "ALLOWED", "DEFERRED", "DENY %", "DOMAIN", "RULE", "KEY"}}
	for _, k := range top.Keys {
		rate := 0.0
		if n := k.Denied + k.Allowed + k.Deferred; n > 0 {
			rate = 100 * float64(k.Denied) / float64(n)
		}
		rows = append(rows, []string{strconv.FormatUint(k.Denied, 10), strconv.FormatUint(k.Allowed, 10),
			strconv.FormatUint(k.Deferred, 10), strconv.FormatFloat(rate, 'f', 1, 64), k.Domain, k.Rule, k.Descriptor})
	}
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i < 4: // counts
				b.WriteString(pad + c + "  ")
			case i < len(r)-1:
				b.WriteString(c + pad + "  ")
			default:
				b.WriteString(c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
	fmt.Fprintf(w, "(last %s, most refused — denied + deferred — first)\n", top.Window)
}
