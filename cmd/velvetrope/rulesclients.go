package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/velvetrope/velvetrope/internal/admin"
	"github.com/velvetrope/velvetrope/rulestore"
)

// importBatchBytes bounds one import request's body, below the listener's
// default http.max_body_bytes (1 MiB).
const importBatchBytes = 512 << 10

func tablePath(domain, table string) string {
	return docPath(domain) + "/clients/" + url.PathEscape(table)
}

// runRulesClients implements `velvetrope rules clients`.
func runRulesClients(args []string, stdout, stderr io.Writer) int {
	cmd := rulesStoreCommands["clients"]
	fs := flag.NewFlagSet("rules clients", flag.ContinueOnError)
	addr, token, timeout := rulesFlags(fs)
	imp := fs.String("import", "", "CSV file of VALUE[,VALUE...],PLAN rows to write (- for stdin)")
	set := fs.String("set", "", "give the client of VALUE... this plan")
	remove := fs.Bool("remove", false, "remove the client of VALUE... (its rules' own limits apply)")
	get := fs.Bool("get", false, "show the client of VALUE...: its plan and each rule's limit for it")
	message := fs.String("message", "", "why: written to the service's log with the change")
	if err := cmd.parse(fs, args, stdout); err != nil {
		return cmd.exit(err, stderr, 2)
	}
	modes := 0
	for _, on := range []bool{*imp != "", *set != "", *remove, *get} {
		if on {
			modes++
		}
	}
	values := fs.Args()[min(2, fs.NArg()):]
	why := ""
	switch {
	case fs.NArg() < 2:
		why = "DOMAIN and TABLE are needed"
	case modes > 1:
		why = "give one of --import, --set, --remove and --get"
	case *imp != "" && len(values) > 0:
		why = "--import takes its clients from the file, not from VALUE..."
	case modes == 1 && *imp == "" && len(values) == 0:
		why = "--set, --remove and --get need the client's VALUE..."
	case modes == 0 && len(values) > 0:
		why = "VALUE... needs --set PLAN, --remove or --get (--set \"\" is not a plan: --remove removes)"
	}
	if why != "" {
		fmt.Fprintf(stderr, "velvetrope rules clients: %s\nusage: velvetrope rules clients %s\n", why, cmd.synopsis)
		return 2
	}
	domain, table := fs.Arg(0), fs.Arg(1)
	ctx := context.Background()
	c := newRulesClient(*addr, *token, *timeout)
	fail := func(err error) int {
		fmt.Fprintf(stderr, "velvetrope rules clients: %v\n", err)
		return 1
	}
	switch {
	case *get:
		q := url.Values{"client": values}
		var out admin.ClientJSON
		if err := c.do(ctx, "GET", tablePath(domain, table)+"/lookup?"+q.Encode(), "", &out); err != nil {
			return fail(err)
		}
		plan := out.Plan
		if !out.Found {
			plan = "(none: the rules' own limits)"
		}
		fmt.Fprintf(stdout, "%s: plan %s\n", strings.Join(out.Client, ","), plan)
		for _, id := range slices.Sorted(maps.Keys(out.Limits)) {
			fmt.Fprintf(stdout, "  %s: %d\n", id, out.Limits[id])
		}
		return 0
	case *set != "" || *remove:
		plan := *set
		return sendClients(ctx, c, domain, table, []rulestore.ClientChange{{Client: values, Plan: plan}}, *message, stdout, stderr)
	case *imp != "":
		var in io.Reader = os.Stdin
		if *imp != "-" {
			f, err := os.Open(*imp)
			if err != nil {
				return fail(err)
			}
			defer f.Close()
			in = f
		}
		changes, lines, err := readClientsCSV(in, *imp)
		if err != nil {
			return fail(err)
		}
		if len(changes) == 0 {
			fmt.Fprintf(stdout, "%s: no rows: nothing written\n", *imp)
			return 0
		}
		// a row the live rules could never match is refused before anything
		// is written, naming its line
		var t admin.TableJSON
		if err := c.do(ctx, "GET", tablePath(domain, table), "", &t); err != nil {
			return fail(err)
		}
		for i, ch := range changes {
			if msg := admin.ArityProblem(t.Rules, len(ch.Client)); msg != "" {
				return fail(fmt.Errorf("%s:%d: %s", *imp, lines[i], msg))
			}
		}
		return sendClients(ctx, c, domain, table, changes, *message, stdout, stderr)
	}
	var t admin.TableJSON
	if err := c.do(ctx, "GET", tablePath(domain, table), "", &t); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "%s/%s: %d clients, %d changes written, plans: %s\n", t.Domain, t.Table, t.Clients, t.Seq, strings.Join(t.Plans, ", "))
	if len(t.Rules) == 0 {
		fmt.Fprintln(stdout, "  no live rule reads this table (a rule's plans: {table: "+table+", limits: ...})")
	}
	for _, r := range t.Rules {
		fmt.Fprintf(stdout, "  %s (client: %s): %d per %s without a plan", r.Rule, strings.Join(r.Client, ","), r.Limit, r.Unit)
		for _, p := range slices.Sorted(maps.Keys(r.Plans)) {
			fmt.Fprintf(stdout, ", %s %d", p, r.Plans[p])
		}
		fmt.Fprintln(stdout)
	}
	return 0
}

// readClientsCSV reads VALUE[,VALUE...],PLAN rows, every row with as
// many fields as the first (a stray trailing comma would otherwise turn
// a plan into a value and the row into a removal); a row's error names
// its line. A UTF-8 byte order mark is skipped; bytes that are not UTF-8
// are refused (the service would refuse them).
func readClientsCSV(in io.Reader, name string) ([]rulestore.ClientChange, []int, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	data = bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))
	if !utf8.Valid(data) {
		for i, l := range bytes.Split(data, []byte("\n")) {
			if !utf8.Valid(l) {
				return nil, nil, fmt.Errorf("%s:%d: not UTF-8 text", name, i+1)
			}
		}
	}
	r := csv.NewReader(bytes.NewReader(data))
	var out []rulestore.ClientChange
	var lines []int
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, lines, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w (every row needs as many fields as the first: VALUE[,VALUE...],PLAN)", name, err)
		}
		line, _ := r.FieldPos(0)
		if len(rec) < 2 {
			return nil, nil, fmt.Errorf("%s:%d: want VALUE[,VALUE...],PLAN, got %d field", name, line, len(rec))
		}
		out = append(out, rulestore.ClientChange{Client: rec[:len(rec)-1], Plan: rec[len(rec)-1]})
		lines = append(lines, line)
	}
}

// sendClients writes changes in batches of at most MaxClientChanges and
// importBatchBytes, in order.
func sendClients(ctx context.Context, c *rulesClient, domain, table string, changes []rulestore.ClientChange, message string,
	stdout, stderr io.Writer) int {
	var unknown []string
	var last admin.ClientsJSON
	for lo := 0; lo < len(changes); {
		hi, size := lo, 64+len(message)
		for hi < len(changes) && hi-lo < rulestore.MaxClientChanges {
			b, _ := json.Marshal(changes[hi])
			if hi > lo && size+len(b)+1 > importBatchBytes {
				break
			}
			size += len(b) + 1
			hi++
		}
		batch := make([]admin.ClientChangeJSON, hi-lo)
		for i, ch := range changes[lo:hi] {
			batch[i] = admin.ClientChangeJSON{Client: ch.Client, Plan: &ch.Plan}
		}
		body, _ := json.Marshal(admin.ClientsRequest{Changes: batch, Message: message})
		if err := c.do(ctx, "POST", tablePath(domain, table), string(body), &last); err != nil {
			fmt.Fprintf(stderr, "velvetrope rules clients: changes %d to %d: %v\n", lo+1, hi, err)
			if lo > 0 {
				fmt.Fprintf(stderr, "velvetrope rules clients: the %d changes before them were written\n", lo)
			}
			return 1
		}
		for _, p := range last.UnknownPlans {
			if !slices.Contains(unknown, p) {
				unknown = append(unknown, p)
			}
		}
		lo = hi
	}
	fmt.Fprintf(stdout, "%s/%s: %d changes written (the table's changes now number %d)\n", domain, table, len(changes), last.Seq)
	if len(unknown) > 0 {
		fmt.Fprintf(stdout, "note: no live rule reading %s names the plans %s: their clients get the rules' own limits\n", table, strings.Join(unknown, ", "))
	}
	return 0
}
