package checker

import (
	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Elastic throttling (docs/design.md, "Elastic pools"): a pool's slot
// follows its borrowers', costing what they take above their own limits
// by their views or their store answers (then redecidePool).

// poolSlots appends, after the descriptors' slots, one slot per pool an
// elastic rule of the request borrows from (slotBuf has room: check counted).
func (c *Checker) poolSlots(slotBuf []slot, slots []slot, req *ratelimit.Request) []slot {
	n := len(slots)
	for i := range n {
		s := &slots[i]
		r := s.rule
		if r == nil || r.Pool == nil || s.dupOf >= 0 || r.Unlimited || r.Limit == 0 {
			continue
		}
		pr := c.ctl.Current().PoolRule(r.Pool)
		j := -1
		for k := n; k < len(slots); k++ {
			if slots[k].rule.ID == pr.ID {
				j = k
			}
		}
		if j < 0 {
			slots = slotBuf[:len(slots)+1]
			j = len(slots) - 1
			h := c.counterHash(pr, pr.Path)
			slots[j] = slot{rule: pr, sh: int(h & c.mask), h: h, idx: i, dupOf: -1, poolSlot: -1, role: rolePool, entries: pr.Path}
		}
		s.poolSlot = j
	}
	return slots
}

// borrowing sets a pool slot's cost to what its borrowers take above
// their own limits (requires the locks); false when none does.
func (c *Checker) borrowing(p *slot, slots []slot) bool {
	cost := borrowed(p, slots)
	p.cost = cost
	if cost == 0 {
		p.need, p.allowed = needNone, true
	}
	return cost > 0
}

// setAbove records what an elastic borrower takes above its own limit, its
// counter at usedAfter with this cost: only the hits beyond the limit.
func (s *slot) setAbove(usedAfter, cost int64) {
	s.above = min(cost, max(usedAfter-s.rule.Limit, 0))
}

// borrowed is what p's borrowers take above their own limits, as they
// stand (admitted, or waiting for their store charge).
func borrowed(p *slot, slots []slot) int64 {
	var cost int64
	for i := range slots {
		if s := &slots[i]; s.poolSlot >= 0 && &slots[s.poolSlot] == p && s.borrows() && (s.allowed || s.stored()) {
			cost += s.above
		}
	}
	return cost
}

// refusedByPool makes a borrower's status say what its pool said: refused
// when the pool had no room for it.
func refusedByPool(slots []slot, n int) {
	for i := range n {
		s := &slots[i]
		if s.poolSlot < 0 || !s.borrows() || !s.allowed {
			continue
		}
		if p := &slots[s.poolSlot]; !p.allowed && p.need != needNone {
			s.allowed, s.above, s.retryAfter, s.never = false, 0, p.retryAfter, p.never
		}
	}
}

// deferring reports whether the request defers: some descriptor refuses
// it, and every one that does defers it (`on_exceed: defer`, the hits
// fitting some day); a refusal no status shows never defers (no rule
// would release the ticket).
func deferring(slots []slot) bool {
	refused := false
	for i := range slots {
		s := &slots[i]
		if s.dupOf >= 0 || s.allowed || s.shadowed || s.need == needNone {
			continue
		}
		if s.role != roleDefer || s.never {
			return false
		}
		refused = true
	}
	return refused
}

// entriesOf is the entries s counts: the descriptor's, or its pool's.
func (s *slot) entriesOf(req *ratelimit.Request) []config.Entry {
	if s.entries != nil {
		return s.entries
	}
	return req.Descriptors[s.idx].Entries
}
