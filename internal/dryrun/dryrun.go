// Package dryrun evaluates a proposed rules document against the usage
// the analytics recorded: per rule, how many of the window's requests it
// would have refused and whose, beside what the live rules refused. The
// usage is per key and minute, so a rule whose windows are whole minutes
// is evaluated exactly (for requests of one hit each); finer windows and
// buckets are estimated, and the report says how.
package dryrun

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/sink"
)

// TopKeys is how many keys a rule's report lists.
const TopKeys = 10

// Report is a dry run's answer.
type Report struct {
	Domain string `json:"domain"`
	// Keys and Requests are what the usage held: distinct descriptors and
	// their requests in the window.
	Keys     int   `json:"keys"`
	Requests int64 `json:"requests"`
	// Unmatched are the requests no proposed rule matches (they would be
	// admitted uncounted).
	Unmatched int64        `json:"unmatched"`
	Rules     []RuleReport `json:"rules"`
	// Note says what the usage can and cannot show.
	Note string `json:"note"`
}

// RuleReport is one proposed rule's evaluation.
type RuleReport struct {
	Rule      string `json:"rule"`
	Limit     int64  `json:"limit"`
	Unit      string `json:"unit,omitempty"`
	Algorithm string `json:"algorithm"`
	Shadow    bool   `json:"shadow,omitempty"` // it would refuse nobody: WouldDeny counts would-be refusals
	// Requests matched to the rule; of them, WouldDeny the proposed rule
	// would refuse and DeniedNow the live rules refused (denied or deferred).
	Requests  int64 `json:"requests"`
	WouldDeny int64 `json:"would_deny"`
	DeniedNow int64 `json:"denied_now"`
	// Exact is false when the minutes of usage only allow an estimate;
	// Method says how the rule was evaluated.
	Exact   bool        `json:"exact"`
	Method  string      `json:"method"`
	TopKeys []KeyReport `json:"top_keys"`
}

// KeyReport is one key under a rule: most would-be refusals first.
type KeyReport struct {
	Descriptor string `json:"descriptor"`
	Requests   int64  `json:"requests"`
	WouldDeny  int64  `json:"would_deny"`
	DeniedNow  int64  `json:"denied_now"`
}

// Evaluate runs the rules of domain in rs over the usage rows (a key's
// rows in minute order, as sink.Demand returns them). plans gives a rule
// with plans the rule of a key's client (the checker's client tables);
// nil decides every client at its rule's own limit.
func Evaluate(rs *config.RuleSet, domain string, rows []sink.Demand, plans func(*config.Rule, []config.Entry) *config.Rule) (Report, error) {
	d, ok := rs.Lookup(domain)
	if !ok {
		return Report{}, fmt.Errorf("the document has no rules for domain %q", domain)
	}
	rep := Report{Domain: domain, Note: "usage is recorded per key and minute for the keys some live rule counted: " +
		"requests no live rule matched are not in it, and values a rule hashes match only rules that take any value"}
	byRule := map[*config.Rule]*RuleReport{}
	keys := map[*config.Rule][]KeyReport{}
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].Descriptor == rows[i].Descriptor {
			j++
		}
		key := rows[i:j]
		i = j
		rep.Keys++
		var k KeyReport
		k.Descriptor = key[0].Descriptor
		for _, m := range key {
			k.Requests += m.Requests()
			k.DeniedNow += m.Denied + m.Deferred
		}
		rep.Requests += k.Requests
		entries, err := config.ParseDescriptorText(k.Descriptor)
		var r *config.Rule
		if err == nil {
			r = d.Match(entries)
		}
		if r == nil {
			rep.Unmatched += k.Requests
			continue
		}
		decide := r
		if r.Plans != nil && plans != nil {
			decide = plans(r, entries) // the client's plan: reported under its rule
		}
		// a descriptor's further limits (limits:) each its own report line
		for j, lr := range append([]*config.Rule{r}, r.Extra...) {
			rr := byRule[lr]
			if rr == nil {
				rr = newRuleReport(lr)
				byRule[lr] = rr
			}
			kk := k
			if j == 0 {
				kk.WouldDeny = wouldDeny(decide, key)
			} else {
				kk.WouldDeny = wouldDeny(lr, key)
			}
			rr.Requests += kk.Requests
			rr.WouldDeny += kk.WouldDeny
			rr.DeniedNow += kk.DeniedNow
			keys[lr] = append(keys[lr], kk)
		}
	}
	for _, r := range rs.Rules() {
		if r.Domain != domain {
			continue
		}
		rr := byRule[r]
		if rr == nil {
			rr = newRuleReport(r)
		}
		ks := keys[r]
		slices.SortFunc(ks, func(a, b KeyReport) int {
			return cmp.Or(cmp.Compare(b.WouldDeny, a.WouldDeny), cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Descriptor, b.Descriptor))
		})
		rr.TopKeys = ks[:min(len(ks), TopKeys)]
		if rr.TopKeys == nil {
			rr.TopKeys = []KeyReport{}
		}
		rep.Rules = append(rep.Rules, *rr)
	}
	return rep, nil
}

func newRuleReport(r *config.Rule) *RuleReport {
	rr := &RuleReport{Rule: r.ID, Limit: r.Limit, Algorithm: string(r.Algorithm), Shadow: r.Shadow}
	if r.Algorithm == config.AlgEnvoy {
		rr.Algorithm = "envoy_fixed_window" // Envoy's, written as no algorithm
	}
	if !r.Unlimited {
		rr.Unit = r.Unit.String()
	}
	rr.Exact, rr.Method = method(r)
	if r.Plans != nil {
		rr.Method += "; each client at its plan's limit (table " + r.Plans.Table + " as this checker holds it)"
	}
	if len(r.Extra) > 0 || strings.Contains(r.ID, ":#limit:") {
		rr.Method += "; one of a descriptor's limits, replayed alone (beside the others, a request they refuse would not count here: an upper bound)"
	}
	return rr
}

// isBucket reports whether the rule's algorithm is a bucket (its state is
// a time, not a window's count).
func isBucket(r *config.Rule) bool {
	switch r.Algorithm {
	case config.AlgTokenBucket, config.AlgLeakyBucket, config.AlgGCRA:
		return true
	}
	return false
}

// method says how a rule is evaluated from minutes of usage.
func method(r *config.Rule) (exact bool, how string) {
	switch {
	case r.Unlimited:
		return true, "unlimited: refuses nothing"
	case r.Limit == 0:
		return true, "a limit of 0 refuses every request"
	case isBucket(r):
		return false, "estimate: a bucket refilled minute by minute, each minute's requests taken at once"
	case r.Window < time.Minute:
		return false, "estimate: a minute's requests spread evenly over its windows (bursts inside a minute are refused more: a lower bound)"
	case r.Window%time.Minute != 0:
		return false, "estimate: windows rounded to whole minutes"
	case r.Algorithm == config.AlgSlidingWindow || r.Algorithm == config.AlgSlidingLog:
		return false, "estimate: the sliding window as fixed windows of its length"
	}
	return true, "exact at one-minute resolution: each window is whole minutes (for requests of one hit each; heavier ones are counted by their average hits)"
}

// ceiling is what a rule admits per window before it refuses: its limit,
// or a soft or elastic throttle's ceiling.
func ceiling(r *config.Rule) int64 {
	if c := r.Ceiling(); c > 0 {
		return c
	}
	return r.Limit
}

// wouldDeny counts the requests of one key's minutes the rule refuses.
func wouldDeny(r *config.Rule, key []sink.Demand) int64 {
	switch {
	case r.Unlimited:
		return 0
	case r.Limit == 0:
		var n int64
		for _, m := range key {
			n += m.Requests()
		}
		return n
	case isBucket(r):
		return bucketDenies(r, key)
	}
	limit := ceiling(r)
	if r.Window < time.Minute {
		perMinute := satMul(limit, int64(time.Minute/r.Window))
		var n int64
		for _, m := range key {
			n += refusedOf(m.Hits(), m.Requests(), perMinute)
		}
		return n
	}
	w := int64(max(r.Window.Round(time.Minute), time.Minute) / time.Second)
	var n int64
	for i := 0; i < len(key); {
		start := key[i].Minute - key[i].Minute%w
		var hits, reqs int64
		j := i
		for ; j < len(key) && key[j].Minute-key[j].Minute%w == start; j++ {
			hits += key[j].Hits()
			reqs += key[j].Requests()
		}
		n += refusedOf(hits, reqs, limit)
		i = j
	}
	return n
}

// bucketDenies runs a bucket of the rule's rate and burst over the
// minutes: full at the key's first minute, refilled by the minutes since
// the one before, each minute's hits taken at once.
func bucketDenies(r *config.Rule, key []sink.Demand) int64 {
	capacity := float64(r.Capacity())
	if capacity <= 0 {
		capacity = float64(r.Limit)
	}
	perMinute := float64(r.Limit) * float64(time.Minute) / float64(r.Window)
	tokens := capacity
	last := key[0].Minute
	var n int64
	for _, m := range key {
		tokens = min(capacity, tokens+perMinute*float64(m.Minute-last)/60)
		last = m.Minute
		hits := m.Hits()
		admitted := min(float64(hits), tokens)
		tokens -= admitted
		n += refusedOf(hits, m.Requests(), int64(admitted))
	}
	return n
}

// refusedOf is how many of reqs requests (hits in all) a window that
// admits allow hits refuses: the hits beyond it, in requests of the
// average weight.
func refusedOf(hits, reqs, allow int64) int64 {
	if hits <= allow || reqs == 0 {
		return 0
	}
	over := hits - allow
	if hits == reqs {
		return over
	}
	n := int64(float64(over)*float64(reqs)/float64(hits) + 0.999999)
	return min(n, reqs)
}

func satMul(a, b int64) int64 {
	if a > 0 && b > 0 && a > (1<<62)/b {
		return 1 << 62
	}
	return a * b
}
