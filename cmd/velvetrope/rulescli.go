package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/admin"
	"github.com/velvetrope/velvetrope/internal/linediff"
)

// rulesClient talks to a running velvetrope's rules store endpoints.
type rulesClient struct {
	base, token string
	hc          *http.Client
}

// rulesFlags are the flags every store subcommand takes.
func rulesFlags(fs *flag.FlagSet) (addr, token *string, timeout *time.Duration) {
	addr = fs.String("addr", "127.0.0.1:8080", "HTTP address of a velvetrope checker or dev")
	// the default is read when the client is made, never shown: --help
	// and a flag error print defaults, and a token is never echoed
	token = fs.String("token", "", "admin token (default $VELVETROPE_ADMIN_TOKEN)")
	timeout = fs.Duration("timeout", 10*time.Second, "give up on a call after this long")
	return
}

func newRulesClient(addr, token string, timeout time.Duration) *rulesClient {
	if token == "" {
		token = os.Getenv("VELVETROPE_ADMIN_TOKEN")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return &rulesClient{base: strings.TrimRight(addr, "/"), token: token, hc: &http.Client{Timeout: timeout}}
}

// apiError is a non-2xx answer, with the service's error text.
type apiError struct {
	status  int
	msg     string
	errs    []string
	current int64
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.msg)
	for _, l := range e.errs {
		s += "\n  " + l
	}
	return s
}

// do sends a request and decodes a 2xx answer into out.
func (c *rulesClient) do(ctx context.Context, method, path, body string, out any, headers ...string) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error   string   `json:"error"`
			Errors  []string `json:"errors"`
			Current int64    `json:"current_version"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &apiError{status: resp.StatusCode, msg: e.Error, errs: e.Errors, current: e.Current}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: an answer that is not the API's: %w", method, path, err)
	}
	return nil
}

func docPath(domain string) string { return "/v1/rules/" + url.PathEscape(domain) }

// current is the store's version of domain: ok false when it has none;
// version is then the delete's, or 0.
func (c *rulesClient) current(ctx context.Context, domain string) (v admin.VersionJSON, ok bool, err error) {
	err = c.do(ctx, "GET", docPath(domain), "", &v)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return admin.VersionJSON{Domain: domain, Version: ae.current}, false, nil
	}
	return v, err == nil, err
}

// runRulesStore implements rules push, diff, history and rollback.
func runRulesStore(sub string, args []string, stdout, stderr io.Writer) int {
	if sub == "clients" {
		return runRulesClients(args, stdout, stderr)
	}
	cmd := rulesStoreCommands[sub]
	fs := flag.NewFlagSet("rules "+sub, flag.ContinueOnError)
	addr, token, timeout := rulesFlags(fs)
	message, stage := new(string), new(string)
	var to *int64
	var limit *int
	var window *string
	switch sub {
	case "push":
		message = fs.String("message", "", "why: recorded with each new version")
		stage = fs.String("stage", "", "shadow: stage each version beside the live rules (it enforces nothing until promoted)")
	case "promote":
		message = fs.String("message", "", "why (default: promote version N)")
	case "rollback":
		message = fs.String("message", "", "why (default: rollback to version N)")
		to = fs.Int64("to", 0, "the version whose document becomes current again")
	case "history":
		limit = fs.Int("limit", 20, "versions to list, newest first")
	case "dry-run":
		window = fs.String("window", "24h", "how much of the recorded usage to replay: 15m, 6h, 7d (at most analytics.max_window)")
	}
	if err := cmd.parse(fs, args, stdout); err != nil {
		return cmd.exit(err, stderr, 2)
	}
	ctx := context.Background()
	c := newRulesClient(*addr, *token, *timeout)
	fail := func(err error) int {
		fmt.Fprintf(stderr, "velvetrope rules %s: %v\n", sub, err)
		return 1
	}
	switch sub {
	case "push", "diff":
		if fs.NArg() == 0 {
			fmt.Fprintf(stderr, "usage: velvetrope rules %s %s\n", sub, cmd.synopsis)
			return 2
		}
		files, err := config.ReadRuleFiles(fs.Args()...)
		if err == nil {
			_, err = config.Compile(files) // each file on its own is checked again by the service, with its rules
		}
		if err != nil {
			return fail(err)
		}
		code := 0
		for _, f := range files {
			body, err := os.ReadFile(f.Path)
			if err != nil {
				return fail(err)
			}
			changed, err := pushOne(ctx, c, sub == "push", f.Domain, f.Path, string(body), *message, *stage, stdout)
			if err != nil {
				fmt.Fprintf(stderr, "velvetrope rules %s: %s (%s): %v\n", sub, f.Domain, f.Path, err)
				code = 1
			}
			if changed && sub == "diff" {
				code = 1 // as diff(1): the store is not what the files say
			}
		}
		return code
	case "dry-run":
		if fs.NArg() == 0 {
			fmt.Fprintf(stderr, "usage: velvetrope rules dry-run %s\n", cmd.synopsis)
			return 2
		}
		files, err := config.ReadRuleFiles(fs.Args()...)
		if err != nil {
			return fail(err)
		}
		code := 0
		for _, f := range files {
			body, err := os.ReadFile(f.Path)
			if err == nil {
				var rep admin.DryRunJSON
				if err = c.do(ctx, "POST", docPath(f.Domain)+"/dry-run?window="+url.QueryEscape(*window), string(body), &rep); err == nil {
					printDryRun(stdout, f.Path, rep)
				}
			}
			if err != nil {
				fmt.Fprintf(stderr, "velvetrope rules dry-run: %s (%s): %v\n", f.Domain, f.Path, err)
				code = 1
			}
		}
		return code
	case "history":
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "usage: velvetrope rules history %s\n", cmd.synopsis)
			return 2
		}
		var h admin.HistoryJSON
		if err := c.do(ctx, "GET", docPath(fs.Arg(0))+"/history?limit="+strconv.Itoa(*limit), "", &h); err != nil {
			return fail(err)
		}
		if len(h.Versions) == 0 {
			fmt.Fprintf(stdout, "%s: no versions in the store\n", h.Domain)
			return 0
		}
		fmt.Fprintf(stdout, "%-8s %-20s %-12s %9s  %s\n", "VERSION", "TIME (UTC)", "AUTHOR", "BYTES", "MESSAGE")
		for _, v := range h.Versions {
			size := strconv.Itoa(v.Bytes)
			if v.Deleted {
				size = "deleted"
			}
			msg := v.Message
			if v.Stage != "" {
				msg = fmt.Sprintf("[staged over version %d] %s", v.LiveVersion, msg)
				if v.LiveVersion == 0 {
					msg = "[staged; nothing live] " + v.Message
				}
			}
			fmt.Fprintf(stdout, "%-8d %-20s %-12s %9s  %s\n", v.Version, v.Time.UTC().Format("2006-01-02 15:04:05"), v.Author, size, msg)
		}
		return 0
	case "promote":
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "usage: velvetrope rules promote %s\n", cmd.synopsis)
			return 2
		}
		q := ""
		if *message != "" {
			q = "?message=" + url.QueryEscape(*message)
		}
		var v admin.VersionJSON
		if err := c.do(ctx, "POST", docPath(fs.Arg(0))+"/promote"+q, "", &v); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s: version %d is live (%s)\n", v.Domain, v.Version, v.Message)
		return 0
	case "rollback":
		if fs.NArg() != 1 || *to < 1 {
			fmt.Fprintf(stderr, "usage: velvetrope rules rollback %s\n", cmd.synopsis)
			return 2
		}
		q := "?to=" + strconv.FormatInt(*to, 10)
		if *message != "" {
			q += "&message=" + url.QueryEscape(*message)
		}
		var v admin.VersionJSON
		if err := c.do(ctx, "POST", docPath(fs.Arg(0))+"/rollback"+q, "", &v); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s: version %d is version %d's document (%s)\n", v.Domain, v.Version, *to, v.Message)
		return 0
	}
	return 2
}

// printDryRun writes a dry run's report: a line per rule, its top keys
// under it.
func printDryRun(w io.Writer, path string, rep admin.DryRunJSON) {
	fmt.Fprintf(w, "%s (%s): the last %s of usage, %d keys, %d requests (%d matched by no rule)\n",
		rep.Domain, path, rep.Window, rep.Keys, rep.Requests, rep.Unmatched)
	fmt.Fprintf(w, "  %-32s %-16s %10s %10s %10s  %s\n", "RULE", "LIMIT", "REQUESTS", "WOULD DENY", "DENIED NOW", "HOW")
	for _, r := range rep.Rules {
		limit := "unlimited"
		if r.Unit != "" {
			limit = fmt.Sprintf("%d/%s", r.Limit, r.Unit)
		}
		how := "exact"
		if !r.Exact {
			how = "estimate"
		}
		if r.Shadow {
			how += ", shadow: refuses nobody"
		}
		fmt.Fprintf(w, "  %-32s %-16s %10d %10d %10d  %s\n", r.Rule, limit, r.Requests, r.WouldDeny, r.DeniedNow, how)
		for _, k := range r.TopKeys {
			if k.WouldDeny == 0 {
				break
			}
			fmt.Fprintf(w, "    %-46s %10d %10d %10d\n", k.Descriptor, k.Requests, k.WouldDeny, k.DeniedNow)
		}
	}
	fmt.Fprintf(w, "  (%s)\n", rep.Note)
}

// pushOne shows how domain's document in the store differs from body and,
// when push, writes it as the next version (If-Match: the version read,
// so a write in between is a conflict, not lost). changed says whether
// the store's document differed.
func pushOne(ctx context.Context, c *rulesClient, push bool, domain, path, body, message, stage string, stdout io.Writer) (changed bool, err error) {
	cur, ok, err := c.current(ctx, domain)
	if err != nil {
		return false, err
	}
	if ok && cur.Body == body && cur.Stage == stage {
		fmt.Fprintf(stdout, "%s: unchanged (version %d)\n", domain, cur.Version)
		return false, nil
	}
	old := ""
	if ok {
		old = cur.Body
	}
	from := fmt.Sprintf("store:%s@%d", domain, cur.Version)
	if !ok {
		from = "/dev/null"
	}
	if ok && cur.Body == body { // the same document, another stage
		if stage == "" {
			fmt.Fprintf(stdout, "%s: the document of staged version %d, written live (a promote)\n", domain, cur.Version)
		} else {
			fmt.Fprintf(stdout, "%s: the document of live version %d, staged\n", domain, cur.Version)
		}
	} else {
		fmt.Fprint(stdout, linediff.Unified(from, path, old, body))
	}
	if !push {
		return true, nil
	}
	qv := url.Values{}
	if message != "" {
		qv.Set("message", message)
	}
	if stage != "" {
		qv.Set("stage", stage)
	}
	q := ""
	if len(qv) > 0 {
		q = "?" + qv.Encode()
	}
	var headers []string
	if cur.Version > 0 {
		headers = []string{"If-Match", `"` + strconv.FormatInt(cur.Version, 10) + `"`}
	}
	var v admin.VersionJSON
	if err := c.do(ctx, "PUT", docPath(domain)+q, body, &v, headers...); err != nil {
		return true, err
	}
	switch {
	case v.Unchanged:
		fmt.Fprintf(stdout, "%s: unchanged (version %d)\n", domain, v.Version)
	case !ok:
		fmt.Fprintf(stdout, "%s: created at version %d\n", domain, v.Version)
	default:
		fmt.Fprintf(stdout, "%s: version %d → %d\n", domain, cur.Version, v.Version)
	}
	if v.Stage != "" && !v.Unchanged {
		fmt.Fprintf(stdout, "%s: version %d is staged: it enforces nothing (version %d stays live) until `velvetrope rules promote %s`\n",
			domain, v.Version, v.LiveVersion, domain)
	}
	return true, nil
}
