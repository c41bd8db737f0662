package checker

import (
	"time"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/compact"
	"github.com/velvetrope/velvetrope/internal/tally"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Compact keys (docs/design.md, "Compact keys"): a key with no entry
// whose decision fits its first-touch allowance is decided on a 32-byte
// record of its hash, window and spent hits (internal/compact), not an
// entry; its decisions leave at the next flush from a shard's fresh list,
// their strings in one reused buffer. A decision the record cannot take,
// or a key seen again after them, makes the entry, which adopts what the
// record's callers were answered for.

// freshHits is a compact key's decisions of one flush interval.
type freshHits struct {
	rule  *config.Rule
	start int64 // the window
	own   int64 // own_after: this instance's answered hits of the window
	// the counter key and descriptor text, in the shard's fresh buffer
	key, desc [2]int32
	p         tally.Pending
}

// compactFirst decides s on a compact record when its key has no entry
// and the allowance takes cost (requires the lock): the hits are spent at
// once, and commitCompact gives them back if the request is refused.
func (c *Checker) compactFirst(sh *shard, s *slot, now int64) bool {
	r, cost := s.rule, s.cost
	a := c.allowance(r)
	if a <= 0 || cost <= 0 || cost > a || !c.spending(now) || sh.tombs.Until(s.h) > now ||
		c.cfg.MaxBytes > 0 && c.bytes.Load() >= c.cfg.MaxBytes {
		return false
	}
	W := int64(r.Window)
	start := limiter.WindowStart(now, W)
	if start < c.ft.horizon[s.h>>52].Load() {
		return false // an evicted entry of this hash may have spent the allowance here
	}
	before := sh.compact.Bytes()
	rec := sh.compact.Make(s.h, start+W, now)
	c.bytes.Add(sh.compact.Bytes() - before)
	if rec == nil || int64(rec.Spent)+cost > a {
		return false
	}
	if _, ok := sh.compact.Pending(rec); rec.Spent > 0 && !ok {
		// seen in an earlier flush interval: an active key, an entry's
		// (whose emission waits as a far key's: a record's leaves at
		// every flush that has its decisions)
		return false
	}
	spent := int64(rec.Spent)
	rec.Spent += uint32(cost)
	sh.stats.first++
	// (Envoy's semantics counts it whatever the request's fate)
	s.need, s.compact, s.charged = needMemory, true, r.Algorithm == config.AlgEnvoy
	reset := time.Duration(start + W - now)
	s.verdict = verdict{allowed: true, remaining: r.Ceiling() - spent - cost, resetAfter: reset}
	if spent > 0 {
		s.resetBefore = reset
	}
	return true
}

// commitCompact records s's compact decision once its request stands
// (requires the lock): admitted, or refused and its hits given back;
// Envoy's semantics counts it either way. An entry made meanwhile (the
// lock was let go for another descriptor's store call) adopted the
// record without these hits: the decision is the entry's.
func (c *Checker) commitCompact(s *slot, req *ratelimit.Request, denied, deferred bool, now int64) {
	sh := &c.shards[s.sh]
	r, cost := s.rule, s.cost
	W := int64(r.Window)
	start := limiter.WindowStart(now, W)
	rec := sh.compact.Find(s.h, start+W)
	admitted := s.charged || !denied
	if rec == nil {
		if e := sh.lookup(s.h, r, s.entriesOf(req)); e != nil {
			if ws, _ := e.ctr.window(r); ws == start {
				s.e = e
				if admitted {
					c.count(s, now, cost, true)
					above(&e.pend, s)
				} else {
					c.countRefused(s, e, now, cost, deferred)
				}
				c.emitSoon(sh, e, now, 0, -1)
				return
			}
		}
	}
	var f *freshHits
	if rec != nil {
		if i, ok := sh.compact.Pending(rec); ok {
			f = &sh.fresh[i]
		}
	}
	if f == nil {
		es := s.entriesOf(req)
		k := int32(len(sh.arena))
		sh.arena = config.AppendCounterKey(sh.arena, r, es)
		d := int32(len(sh.arena))
		sh.arena = config.AppendDescriptorText(sh.arena, es)
		sh.fresh = append(sh.fresh, freshHits{rule: r, start: start, key: [2]int32{k, d}, desc: [2]int32{d, int32(len(sh.arena))}})
		// the strings waiting count in the table's bytes (max_bytes): at its
		// bound, keys take entries, which it evicts
		c.bytes.Add(int64(len(sh.arena)) - int64(k))
		f = &sh.fresh[len(sh.fresh)-1]
		if rec != nil {
			sh.compact.SetPending(rec, len(sh.fresh)-1)
		}
		c.dirtyN.Add(1)
	}
	if admitted {
		if rec != nil {
			rec.Own += uint32(cost)
			f.own = int64(rec.Own)
		}
		f.p.Tally(now, cost, true, tally.Denied, true)
		f.p.Counted += uint64(cost)
		above(&f.p, s)
		return
	}
	if rec != nil {
		rec.Spent -= min(rec.Spent, uint32(cost))
	}
	f.p.Tally(now, cost, false, refusalOf(s, deferred), false)
}

// appendFresh moves a shard's compact decisions into deltas (requires
// the lock): each its own analytics stream, as a key tracked anew is.
func (c *Checker) appendFresh(deltas []*eventsv1.Delta, sh *shard) []*eventsv1.Delta {
	for i := range sh.fresh {
		f := &sh.fresh[i]
		if !f.p.Used() {
			continue
		}
		r := f.rule
		d := &eventsv1.Delta{
			InstanceId: c.instance, Domain: r.Domain, RuleId: r.ID, Algorithm: string(r.Algorithm),
			DescriptorText: string(sh.arena[f.desc[0]:f.desc[1]]), CounterKey: string(sh.arena[f.key[0]:f.key[1]]),
			WindowNanos: int64(r.Window), Limit: r.Limit, OwnAfter: uint64(f.own), WindowStartUnixNanos: f.start,
		}
		u := tally.NewMinute(c.streams.Add(1))
		f.p.Fill(d, &u)
		deltas = append(deltas, d)
	}
	c.bytes.Add(-int64(len(sh.arena)))
	clear(sh.fresh)
	sh.fresh, sh.arena = sh.fresh[:0], sh.arena[:0]
	if cap(sh.arena) > maxIdleArena { // a burst's (large values): not kept
		sh.arena = nil
	}
	sh.compact.NextGen()
	return deltas
}

// adopt gives a new entry what its key's compact record holds (requires
// the lock). Of the current window: the hits its callers were answered
// for, on their way already, are its instance's memory consumption there;
// hits of requests still waiting on another descriptor's store call come
// to the entry when those stand (commitCompact), and until the window
// ends the entry neither spends nor marks (it may not hold all its hits).
// Of a later window (this clock is behind it): that window's hits are in
// flight as an evicted entry's are.
func (c *Checker) adopt(sh *shard, e *entry, now int64) {
	if sh.compact.Len() == 0 || c.allowance(e.rule) <= 0 {
		return
	}
	rec, ok := sh.compact.Take(e.hash)
	if !ok {
		return
	}
	W := int64(e.rule.Window)
	switch end := limiter.WindowStart(now, W) + W; {
	case rec.Until() > end:
		c.raiseHorizon(e.hash, rec.Until())
		e.whole = max(e.whole, rec.Until())
	case rec.Until() == end:
		e.ctr.roll(c, sh, e, now)
		e.ctr.addMemory(int64(rec.Own))
		if rec.Spent > rec.Own {
			e.whole = max(e.whole, end)
		}
	}
}

// maxIdleArena is the most a shard's strings buffer keeps between flushes.
const maxIdleArena = 64 << 10

// spending says whether this instance may spend first-touch allowances
// at now: it joined the registry long enough ago, and heard it recently.
func (c *Checker) spending(now int64) bool {
	j := c.ft.joined.Load()
	return j > 0 && now >= j+c.ft.settle && now < c.ft.lastOK.Load()+c.ft.stop
}

// compactTable is a shard's table of compact keys, bounded as its entries are.
func (c *Checker) compactTable() compact.Table { return compact.New(c.perShard) }
