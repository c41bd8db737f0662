package checker

import (
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Hashed returns req with the values of hash_values rules replaced by
// their keyed hashes, as the checker counts them (req itself when no rule
// of it hashes): what may leave the process, e.g. a deferred request on
// its topic. Descriptors that match no rule, or an unknown domain, are
// left as they are; a rule another replaces hashes all the same (a value
// its own rule hashes never leaves raw).
func (c *Checker) Hashed(req *ratelimit.Request) *ratelimit.Request {
	out := c.hash.Hashed(c.rules.Load(), req)
	if out != req {
		c.warnRandom()
	}
	return out
}

// applyHashing returns req with the values of hashed entries replaced,
// as a copy, or req itself when no matched rule hashes.
func (c *Checker) applyHashing(req *ratelimit.Request, matched []*config.Rule) *ratelimit.Request {
	out := c.hash.Request(req, matched)
	if out != req {
		c.warnRandom()
	}
	return out
}

// warnRandom warns once, when values were hashed with a random key: their
// counters are this process's alone.
func (c *Checker) warnRandom() {
	if c.hash.Random() {
		c.hashLog.Do(func() {
			c.cfg.Logger.Warn("hash_values rules are hashed with a random per-process key: set checker.hash_key " +
				"(VELVETROPE_HASH_KEY) to the same secret on every checker, or their counters are not shared")
		})
	}
}
