package checker

import (
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Several limits on one descriptor (config.Rule.Extra): each further
// limit is a slot of its own, keyed by its own rule, decided as another
// descriptor of the request would be — so a request one limit refuses is
// charged to none of the algorithm rules, as with any refused request —
// and its answer is merged into its descriptor's status.

// extraSlots appends, after the descriptors' slots, one slot per further
// limit of each descriptor (slotBuf has room: prepare counted). A
// descriptor repeating another is decided with it: its limits too.
func (c *Checker) extraSlots(slotBuf []slot, slots []slot, req *ratelimit.Request) []slot {
	n := len(slots)
	for i := range n {
		s := &slots[i]
		if s.dupOf >= 0 || s.rule == nil || s.rule.Unlimited {
			continue
		}
		es := req.Descriptors[i].Entries
		for _, x := range s.rule.Extra {
			slots = slotBuf[:len(slots)+1]
			h := c.counterHash(x, es)
			slots[len(slots)-1] = slot{rule: x, sh: int(h & c.mask), h: h, idx: i, dupOf: -1, poolSlot: -1, role: slots[i].role,
				cost: slots[i].cost, extra: true}
		}
	}
	return slots
}

// mergeExtras makes descriptor i's status its limits' most severe
// (worse). The status's rule names the limit.
func (c *Checker) mergeExtras(st *ratelimit.Status, p *pass, i int) {
	for k := p.n; k < len(p.slots); k++ {
		s := &p.slots[k]
		if !s.extra || s.idx != i || s.call == callSkipped {
			continue // (skipped: another refused first, so it was never asked; its answer is unknown)
		}
		var xs ratelimit.Status
		c.status(&xs, s, p.denied, p.now)
		if worse(&xs, st) {
			*st = xs
		}
	}
}

// worse says a is the status to answer over b: more severe; between
// refusals the longer wait (a client told to retry sooner would be
// refused again by the other limit); between admissions less remaining.
func worse(a, b *ratelimit.Status) bool {
	sa, sb := severity(a), severity(b)
	switch {
	case sa != sb:
		return sa > sb
	case sa == 2:
		return a.RetryNever && !b.RetryNever || a.RetryNever == b.RetryNever && a.RetryAfter > b.RetryAfter
	}
	return a.Remaining < b.Remaining
}

func severity(st *ratelimit.Status) int {
	switch {
	case st.Code != ratelimit.OK:
		return 2
	case st.Shadowed:
		return 1
	}
	return 0
}
