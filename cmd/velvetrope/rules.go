package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/velvetrope/velvetrope/config"
)

// runRules implements `velvetrope rules validate PATH...`: a one-line
// summary per domain and exit 0 when valid; FILE:LINE:COL: reason lines on
// stderr and exit 1 when not. Flags end at the first path (or "--"): a
// path that begins with "-" follows "--".
func runRules(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rules validate", flag.ContinueOnError)
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		rulesCommand.help(stdout, fs)
		return 0
	}
	if len(args) > 0 {
		if _, ok := rulesStoreCommands[args[0]]; ok {
			return runRulesStore(args[0], args[1:], stdout, stderr)
		}
	}
	if len(args) == 0 || args[0] != "validate" {
		fmt.Fprintln(stderr, "usage: velvetrope rules validate|push|diff|dry-run|history|rollback|promote|clients ... (velvetrope rules SUBCOMMAND --help)")
		return 2
	}
	if err := rulesCommand.parse(fs, args[1:], stdout); err != nil {
		return rulesCommand.exit(err, stderr, 2)
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: velvetrope rules validate FILE|DIR...")
		return 2
	}
	rs, err := config.LoadRules(fs.Args()...)
	if err != nil {
		var list config.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				fmt.Fprintln(stderr, e.Error())
			}
		} else {
			fmt.Fprintln(stderr, err)
		}
		return 1
	}
	type summary struct {
		rules, shadow, unlimited int
		algorithms               []string
	}
	per := map[string]*summary{}
	for _, r := range rs.Rules() {
		s := per[r.Domain]
		if s == nil {
			s = &summary{}
			per[r.Domain] = s
		}
		s.rules++
		if r.Shadow {
			s.shadow++
		}
		if r.Unlimited {
			s.unlimited++
		}
		alg := string(r.Algorithm)
		if alg == "" {
			alg = "envoy_fixed_window"
		}
		if !r.Unlimited && !slices.Contains(s.algorithms, alg) {
			s.algorithms = append(s.algorithms, alg)
		}
	}
	for _, d := range rs.Domains() {
		s := per[d]
		if s == nil {
			s = &summary{}
		}
		slices.Sort(s.algorithms)
		fmt.Fprintf(stdout, "%s: ok, %d rules (%d shadow, %d unlimited), algorithms %v\n",
			d, s.rules, s.shadow, s.unlimited, s.algorithms)
		for _, p := range rs.Pools() {
			if p.Domain == d {
				fmt.Fprintf(stdout, "  pool %s: %d per %s, shared by the elastic rules that name it\n", p.Name, p.Limit, p.Unit)
			}
		}
		for _, r := range rs.Rules() {
			if r.Domain != d {
				continue
			}
			switch {
			case r.OnExceed == config.ExceedDefer:
				fmt.Fprintf(stdout, "  %s: over %d per %s a request is deferred, not refused: released when the key has budget again and "+
					"delivered to %s (idempotency key: its ticket), tried %d times within %v; payloads up to %d bytes; "+
					"at most %d queued per key (max_queued), beyond that refused\n",
					r.ID, r.Limit, r.Unit, r.Defer.Target, r.Defer.MaxAttempts, r.Defer.MaxAge, r.Defer.MaxPayloadBytes, r.Defer.MaxQueued)
			case r.Throttle.Type == config.ThrottleElastic:
				fmt.Fprintf(stdout, "  %s: elastic: over its %d per %s it borrows from pool %s while the pool has room, up to %d per %s (× %d)\n",
					r.ID, r.Limit, r.Unit, r.Throttle.Pool, r.Ceiling(), r.Unit, r.Throttle.MaxMultiplier)
			case r.Throttle.Type == config.ThrottleSoft:
				fmt.Fprintf(stdout, "  %s: soft: admits up to %d per %s (%d %% over its %d), flagged over_soft\n",
					r.ID, r.Ceiling(), r.Unit, r.Throttle.OveragePercent, r.Limit)
			}
		}
	}
	return 0
}
