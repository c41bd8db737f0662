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
	"unicode"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/client"
	"github.com/velvetrope/velvetrope/sink"
)

// runTop implements `velvetrope top`: the most denied keys of a running
// velvetrope (its HTTP listener) — or with --pools its elastic pools'
// borrowings — as an aligned table or, with --json, as the service
// answered. Exit 0 on success, 1 on any error.
func runTop(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	window := fs.String("window", "1h", "how far back: 15m, 6h, 7d (1m to the service's analytics.max_window, 7d by default)")
	domain := fs.String("domain", "", "only this domain")
	rule := fs.String("rule", "", "only this rule id")
	limit := fs.Int("limit", 10, "keys to list (1 to 1000)")
	addr := fs.String("addr", "127.0.0.1:8080", "HTTP address of a velvetrope checker or dev")
	asJSON := fs.Bool("json", false, "print the service's JSON answer")
	pools := fs.Bool("pools", false, "list the elastic pools' borrowings instead of keys")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	token := fs.String("token", os.Getenv("VELVETROPE_ANALYTICS_TOKEN"), "analytics token, when the service requires one (default $VELVETROPE_ANALYTICS_TOKEN)")
	if err := topCommand.parse(fs, args, stdout); err != nil {
		return topCommand.exit(err, stderr, 1)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "velvetrope top: unexpected argument %q\n", fs.Arg(0))
		return 1
	}
	if *limit < 1 || *limit > 1000 {
		fmt.Fprintf(stderr, "velvetrope top: --limit: want a whole number from 1 to 1000, got %d\n", *limit)
		return 1
	}
	limitSet := false
	fs.Visit(func(f *flag.Flag) { limitSet = limitSet || f.Name == "limit" })
	if *pools && *rule != "" {
		fmt.Fprintln(stderr, "velvetrope top: --rule selects keys; --pools lists pools (by --domain)")
		return 1
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	hc := client.NewHTTP(base, nil, *timeout)
	var answer any
	var err error
	if *pools {
		var p client.Pools
		p, err = hc.Pools(ctx, client.PoolsQuery{Window: *window, Domain: *domain, Token: *token})
		if limitSet && len(p.Pools) > *limit { // (the service lists every pool; they are few)
			p.Pools = p.Pools[:*limit]
		}
		answer = p
		if err == nil && !*asJSON {
			printPools(stdout, p)
		}
	} else {
		var top client.TopDenied
		top, err = hc.TopDenied(ctx, client.TopQuery{Window: *window, Domain: *domain, Rule: *rule, Limit: *limit, Token: *token})
		answer = top
		if err == nil && !*asJSON {
			printTop(stdout, top)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "velvetrope top: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(answer)
	}
	return 0
}

// printTop writes the keys as a table: every count apart (docs/analytics.md),
// the deny rate of every decision (sink.DenyRate), then the names.
func printTop(w io.Writer, top client.TopDenied) {
	if len(top.Keys) == 0 {
		fmt.Fprintf(w, "no denied keys in the last %s\n", top.Window)
		return
	}
	rows := [][]string{{"DENIED", "ALLOWED", "DEFERRED", "SHADOW", "OVER-SOFT", "ELASTIC", "DENY %", "DOMAIN", "RULE", "KEY"}}
	for _, k := range top.Keys {
		rate := 100 * sink.DenyRate(k.Allowed, k.Denied, k.Deferred, k.ShadowDenied)
		rows = append(rows, []string{u(k.Denied), u(k.Allowed), u(k.Deferred), u(k.ShadowDenied), u(k.OverSoft), u(k.Elastic),
			strconv.FormatFloat(rate, 'f', 1, 64), k.Domain, k.Rule, k.Descriptor})
	}
	printTable(w, rows, 7)
	fmt.Fprintf(w, "(last %s, most refused — denied + deferred — first)\n", top.Window)
}

// printPools writes the pools' borrowings as a table.
func printPools(w io.Writer, p client.Pools) {
	if len(p.Pools) == 0 {
		fmt.Fprintf(w, "no pool lent or refused anything in the last %s\n", p.Window)
		return
	}
	rows := [][]string{{"BORROWED", "HITS", "REFUSED", "DOMAIN", "POOL"}}
	for _, x := range p.Pools {
		rows = append(rows, []string{u(x.Borrowed), u(x.BorrowedHits), u(x.Refused), x.Domain, x.Pool})
	}
	printTable(w, rows, 3)
	fmt.Fprintf(w, "(last %s: admissions that borrowed from each pool, their hits, and the borrowings it refused)\n", p.Window)
}

func u(n uint64) string { return strconv.FormatUint(n, 10) }

// printTable writes rows aligned: the first counts columns right-aligned,
// the rest left-aligned, columns as wide as their widest cell.
func printTable(w io.Writer, rows [][]string, counts int) {
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			r[i] = printable(c)
			width[i] = max(width[i], utf8.RuneCountInString(r[i]))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i < counts:
				b.WriteString(pad + c + "  ")
			case i < len(r)-1:
				b.WriteString(c + pad + "  ")
			default:
				b.WriteString(c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// printable is s as a terminal may show it: names and values come from
// clients (a descriptor's value is whatever a request sent), so control
// characters, invisible format characters (bidirectional overrides) and
// invalid UTF-8 are written as escapes (\x1b, \u202e) — raw, they could
// move the cursor, recolour the screen or fake a row of the table.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && (!unicode.IsGraphic(r)):
			fmt.Fprintf(&b, `\x%02x`, r)
		case !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
