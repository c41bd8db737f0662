package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/bench/rlqsclient"
)

// The RLQS accuracy scenario: the overshoot scenario's fleet (3 checkers,
// an aggregator, the real Kafka and Redis) serves Envoy's rate limit quota
// service; 6 RLQS clients (bench/rlqsclient: Envoy's filter as documented,
// reporting every second), two on each checker, share one bucket of limit
// L a minute, asking 2 × L over a minute, unevenly (weights 1 to 6). What
// they admit in one minute's window is measured against L.

// rlqsCase is one limit's runs.
type rlqsCase struct {
	Limit    int64   `json:"limit"`
	Runs     []int64 `json:"admitted"` // admitted in the window, per run
	Asked    []int64 `json:"asked"`
	Median   int64   `json:"median"`
	Clients  int     `json:"clients"`
	Interval string  `json:"reporting_interval"`
}

// rlqsReport is the scenario's result.
type rlqsReport struct {
	Cases   []rlqsCase    `json:"cases"`
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took_ns"`
	Commit  string        `json:"commit"`
}

// rlqsRules are the quota service's rules: one bucket key, a limit per L.
func rlqsRules() string {
	var b strings.Builder
	b.WriteString("domain: quota\ndescriptors:\n")
	for _, l := range overLimits {
		fmt.Fprintf(&b, "  - key: q%d\n    rlqs: {bucket_keys: [q%d]}\n    algorithm: fixed_window\n    near_limit: async\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", l, l, l)
	}
	return b.String()
}

const rlqsClients = 6

// rlqsRun is one minute's window of 6 clients at 2 × L a minute.
func rlqsRun(grpcAddrs []string, l int64) (admitted, asked int64, err error) {
	// the run is one whole window: from just after a minute starts
	time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 300*time.Millisecond)))
	end := time.Now().Truncate(time.Minute).Add(time.Minute - 300*time.Millisecond)
	bucket := map[string]string{"q" + strconv.FormatInt(l, 10): "r" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	var clients []*rlqsclient.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := range rlqsClients {
		c, err := rlqsclient.Dial(grpcAddrs[i%len(grpcAddrs)], rlqsclient.Options{Domain: "quota", Interval: time.Second})
		if err != nil {
			return 0, 0, err
		}
		clients = append(clients, c)
	}
	var adm, ask atomic.Int64
	var wg sync.WaitGroup
	total := 2 * float64(l) / 60 // requests a second, all clients
	for i, c := range clients {
		rate := total * float64(i+1) / 21 // weights 1..6 over 21
		wg.Add(1)
		go func() {
			defer wg.Done()
			every := time.Duration(float64(time.Second) / rate)
			next := time.Now()
			for time.Now().Before(end) {
				ask.Add(1)
				if c.Allow(bucket) {
					adm.Add(1)
				}
				next = next.Add(every)
				time.Sleep(time.Until(next))
			}
		}()
	}
	wg.Wait()
	for _, c := range clients {
		if err := c.Err(); err != nil {
			return 0, 0, fmt.Errorf("an RLQS stream failed: %w", err)
		}
	}
	return adm.Load(), ask.Load(), nil
}

// rlqsAccuracy runs the scenario on a velvetrope fleet.
func rlqsAccuracy(o options, dir string) (rlqsReport, error) {
	rep := rlqsReport{Started: time.Now(), Commit: commit()}
	fl, err := launchVelvetropeFleet(o, dir)
	if err != nil {
		return rep, err
	}
	defer fl.stop()
	for _, l := range overLimits {
		c := rlqsCase{Limit: l, Clients: rlqsClients, Interval: "1s"}
		for i := range o.rlqsRuns {
			adm, ask, err := rlqsRun(fl.addrs, l)
			if err != nil {
				return rep, fmt.Errorf("rlqs L=%d run %d: %w", l, i, err)
			}
			c.Runs, c.Asked = append(c.Runs, adm), append(c.Asked, ask)
			fmt.Fprintf(os.Stderr, "rlqs: L=%-6d run %d: %d clients admitted %d of %d asked in a minute's window (%+.1f %%)\n",
				l, i, rlqsClients, adm, ask, 100*float64(adm-l)/float64(l))
		}
		c.Median = median(c.Runs)
		rep.Cases = append(rep.Cases, c)
	}
	rep.Took = time.Since(rep.Started)
	return rep, nil
}

const (
	rlqsBegin = "<!-- bench-compare rlqs: begin (written by make bench-compare; edits between the marks are lost) -->"
	rlqsEnd   = "<!-- bench-compare rlqs: end -->"
)

// markdown is the scenario's section.
func (r *rlqsReport) markdown() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n## RLQS accuracy across checkers\n\nMeasured %s, commit `%s`, by `make bench-compare` (%s): %d RLQS clients "+
		"(`bench/rlqsclient`: Envoy's rate_limit_quota filter as documented — local decisions from each assignment, a report every "+
		"second and at once on a new assignment), two on each of 3 checkers with an aggregator, the real Kafka and Redis; one bucket of "+
		"limit L a minute (`fixed_window`, `near_limit: async`), asked 2 × L over one minute's window, unevenly (the clients' demands are "+
		"1 to 6 parts of 21). Each cell: what the clients admitted in the window, against L (every run in brackets). Everything shares "+
		"the 2 cores. The bound asked: between 0.9 × L and 1.05 × L.\n\n", rlqsBegin, r.Started.UTC().Format("2006-01-02"), r.Commit,
		r.Took.Round(time.Second), rlqsClients)
	b.WriteString("| admitted vs L |")
	for _, c := range r.Cases {
		fmt.Fprintf(&b, " L = %s |", thousands(c.Limit))
	}
	b.WriteString("\n|---|")
	for range r.Cases {
		b.WriteString("---|")
	}
	b.WriteString("\n| velvetrope RLQS, 6 clients over 3 checkers |")
	for _, c := range r.Cases {
		var all []string
		for i, v := range c.Runs {
			all = append(all, fmt.Sprintf("%s of %s asked", thousands(v), thousands(c.Asked[i])))
		}
		lo, hi := slices.Min(c.Runs), slices.Max(c.Runs)
		fmt.Fprintf(&b, " median %s (%+.1f %%), %+.1f %% to %+.1f %% [%s] |", thousands(c.Median), 100*float64(c.Median-c.Limit)/float64(c.Limit),
			100*float64(lo-c.Limit)/float64(c.Limit), 100*float64(hi-c.Limit)/float64(c.Limit), strings.Join(all, "; "))
	}
	fmt.Fprintf(&b, "\n\nGubernator GLOBAL's row of the same limits is the overshoot scenario's (above): no open RLQS server exists to compare with.\n%s\n", rlqsEnd)
	return b.String()
}

// writeRLQS replaces the scenario's section of path (appending it when
// the marks are absent).
func writeRLQS(path string, r rlqsReport) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	section := r.markdown()
	i, j := strings.Index(s, rlqsBegin), strings.Index(s, rlqsEnd)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + section + strings.TrimPrefix(s[j+len(rlqsEnd):], "\n")
	case i >= 0 || j >= 0:
		return fmt.Errorf("%s: only one of the rlqs marks is present; fix the file by hand", path)
	default:
		s = strings.TrimRight(s, "\n") + "\n\n" + section
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
