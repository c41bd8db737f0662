package checker

import "github.com/velvetrope/velvetrope/ratelimit"

// Hashed returns req with the values of hash_values rules replaced by
// their keyed hashes, as the checker counts them (req itself when no rule
// of it hashes): what may leave the process, e.g. a deferred request on
// its topic. Descriptors that match no rule are left as they are; a rule
// another replaces hashes all the same (its values never leave raw).
func (c *Checker) Hashed(req *ratelimit.Request) *ratelimit.Request {
	return c.hashed(req, c.hash.Hashed(c.rules.Load(), req))
}

// hashed returns out, req with values hashed, warning once when they were
// hashed with a random key: counters no other checker shares.
func (c *Checker) hashed(req, out *ratelimit.Request) *ratelimit.Request {
	if out != req && c.hash.Random() {
		c.warnRandomKey()
	}
	return out
}

func (c *Checker) warnRandomKey() {
	c.hashLog.Do(func() {
		c.cfg.Logger.Warn("hash_values rules are hashed with a random per-process key: set checker.hash_key " +
			"(VELVETROPE_HASH_KEY) to the same secret on every checker, or their counters are not shared")
	})
}
