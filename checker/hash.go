package checker

import (
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Hashed returns req with the values of hash_values rules replaced by
// their keyed hashes, as the checker counts them (req itself when no rule
// of it hashes): what may leave the process, e.g. a deferred request on
// its topic. Descriptors that match no rule, or an unknown domain, are
// left as they are.
func (c *Checker) Hashed(req *ratelimit.Request) *ratelimit.Request {
	dom, known := c.rules.Load().Lookup(req.Domain)
	if !known || req.Prehashed || len(req.Descriptors) > config.MaxDescriptors {
		return req
	}
	var buf [config.MaxDescriptors]*config.Rule
	matched := matchRules(dom, req, buf[:len(req.Descriptors)])
	// (replaced rules too: a value its own rule hashes never leaves raw)
	return c.applyHashing(req, matched)
}

// matchRules fills matched with each descriptor's rule: its own (an
// override, a release naming it), else the one its entries match.
func matchRules(dom config.Domain, req *ratelimit.Request, matched []*config.Rule) []*config.Rule {
	for i := range req.Descriptors {
		if matched[i] = req.Descriptors[i].Rule; matched[i] == nil {
			matched[i] = dom.Match(req.Descriptors[i].Entries)
		}
	}
	return matched
}

// applyHashing returns req with the values of hashed entries replaced,
// as a copy, or req itself when no matched rule hashes.
func (c *Checker) applyHashing(req *ratelimit.Request, matched []*config.Rule) *ratelimit.Request {
	out := c.hash.Request(req, matched)
	if out != req && c.hash.Random() {
		c.hashLog.Do(func() {
			c.cfg.Logger.Warn("hash_values rules are hashed with a random per-process key: set checker.hash_key " +
				"(VELVETROPE_HASH_KEY) to the same secret on every checker, or their counters are not shared")
		})
	}
	return out
}
