package checker

import (
	"math"
	"time"
	"unsafe"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/estimate"
	"github.com/velvetrope/velvetrope/internal/tally"
	"github.com/velvetrope/velvetrope/limiter"
)

// counter is a key's algorithm state, the one place that knows the kind:
// a window counter (fixed, sliding, Envoy's) or a bucket (token bucket,
// GCRA and the leaky meter share one async form). Its methods never take
// a slot: a pointer passed through an interface call escapes, and a small
// request's slots live on the stack. All require the shard lock.
type counter interface {
	kind() counters.Kind
	size() int // what it adds to its entry's allocation (membytes.go)
	// window is the current window (a bucket: 0 to math.MaxInt64).
	window(r *config.Rule) (start, end int64)
	known() bool // the store answered for the current window
	// roll moves to the window holding now; what was pending for the one
	// left behind leaves as orphans.
	roll(c *Checker, sh *shard, e *entry, now int64)
	// look fills lk, once per decision, for the band and the decision.
	look(c *Checker, e *entry, now, cost int64, lk *look)
	// judge decides from memory; capped: past this instance's slice.
	judge(c *Checker, e *entry, lk *look, now, cost int64, capped bool) verdict
	// state is what remains now, and the reset once cost more is charged.
	state(c *Checker, e *entry, now, cost int64) (remaining int64, resetAfter time.Duration)
	// admit records an admission decided from memory; post is look's
	// state after the cost, still current when held (the lock kept).
	admit(e *entry, now, cost int64, post limiter.State, held bool)
	// force takes a late charge's hits into the view, past the limit if
	// need be (late.go), and returns the hits the counter takes: cost, or
	// less where a bucket's debt is bounded (addMemory then counts them).
	force(e *entry, now, cost int64) int64
	addMemory(cost int64)  // this instance's hits decided in memory
	addCharged(cost int64) // this instance's hits the store charged
	mineMemory() int64     // the former, as a delta's own_after reports it
	// ownCounts is this instance's count in the current window and the
	// store's part of it, measuring the pipeline's lag (ok: on this kind).
	ownCounts() (counted, own int64, ok bool)
	fillCharge(c *Checker, e *entry, q *counters.ChargeRequest)
	absorbCharge(c *Checker, e *entry, now int64, q *counters.ChargeRequest, res *counters.ChargeResult, cost int64,
		charged, allowed bool) learned
	// reads appends a refresh's store reads (tags: refresh item tags).
	reads(c *Checker, e *entry, items []counters.ReadItem, ents []*entry, tags []uint8) ([]counters.ReadItem, []*entry, []uint8)
	// absorbRead takes in a read of its own counter (ok: of a current window).
	absorbRead(c *Checker, e *entry, it *counters.ReadItem, now int64) (remaining, pred, ceiling int64, ok bool)
	// absorbOther takes in a read of another counter of a hot key.
	absorbOther(e *entry, tag uint8, it *counters.ReadItem)
	// parkable: unused, the key may go unread (its charges teach it all).
	parkable(r *config.Rule) bool
	fillDelta(e *entry, d *eventsv1.Delta)
}

// newEntry allocates an entry with its counter beside it: one allocation,
// no pointer chase on a decision.
func newEntry(r *config.Rule) *entry {
	if kindOf(r) == counters.KindTAT {
		p := new(struct {
			entry
			b bucketCounter
		})
		p.ctr = &p.b
		return &p.entry
	}
	p := new(struct {
		entry
		w windowCounter
	})
	p.ctr = &p.w
	return &p.entry
}

// kindOf is the kind of r's counters (a blocked rule's: a window).
func kindOf(r *config.Rule) counters.Kind {
	if r.Algorithm.Bucket() && r.Limit > 0 {
		return counters.KindTAT
	}
	return counters.KindWindow
}

// look is a key's view at one decision.
type look struct {
	used      int64 // applied-or-own consumption (windows), for the report
	mine      int64 // the part of it this instance counted
	pred      int64 // predicted others' in-flight consumption
	remaining int64 // what is left now, before this request
	ceiling   int64
	// a bucket's trial of the request and its state after it (commit)
	try  limiter.Decision
	post limiter.State
}

// verdict is a descriptor's decision.
type verdict struct {
	allowed     bool  // the descriptor admits the request
	never       bool  // the cost never fits
	remaining   int64 // after this request
	resetAfter  time.Duration
	resetBefore time.Duration // as things stand: reported when nothing is charged
	retryAfter  time.Duration
}

// learned is what a charge's answer said of the key.
type learned struct {
	rolled     bool // the window rolled while charging: nothing learned
	never      bool
	remaining  int64
	resetAfter time.Duration
	retryAfter time.Duration
	roomUntil  int64 // how long the answer's room is trusted
}

// windowCounter is a window-kind key's current and previous window.
type windowCounter struct {
	cur, prev estimate.Window
}

func (w *windowCounter) kind() counters.Kind          { return counters.KindWindow }
func (w *windowCounter) size() int                    { return int(unsafe.Sizeof(*w)) }
func (w *windowCounter) known() bool                  { return w.cur.Known }
func (w *windowCounter) addMemory(cost int64)         { w.cur.Emitted += cost }
func (w *windowCounter) addCharged(cost int64)        { w.cur.Charged += cost }
func (w *windowCounter) mineMemory() int64            { return w.cur.Emitted }
func (w *windowCounter) parkable(r *config.Rule) bool { return r.Shards <= 1 }
func (w *windowCounter) ownCounts() (int64, int64, bool) {
	return w.cur.Emitted + w.cur.Charged, w.cur.Own, true
}

func (w *windowCounter) window(r *config.Rule) (int64, int64) {
	if w.cur.Start == 0 {
		return 0, math.MaxInt64
	}
	return w.cur.Start, w.cur.Start + int64(r.Window)
}

func (w *windowCounter) admit(*entry, int64, int64, limiter.State, bool) {}

func (w *windowCounter) fillDelta(_ *entry, d *eventsv1.Delta) { d.WindowStartUnixNanos = w.cur.Start }

func (w *windowCounter) roll(c *Checker, sh *shard, e *entry, now int64) {
	W := int64(e.rule.Window)
	ws := limiter.WindowStart(now, W)
	if ws <= w.cur.Start {
		return // same window, or a clock behind it: stay
	}
	own := int64(0) // (own_after: as in appendDeltas)
	if c.ownKnown(e) {
		own = w.cur.Emitted
	}
	if e.emit == emitLazy { // its orphans carry all: the next decision queues it anew
		sh.unlazy(e)
		e.emit = emitClean
	}
	if e.pendApplied.Used() { // store charges of the window left behind
		sh.orphans = append(sh.orphans, c.delta(e, &e.pendApplied, true, own))
		e.pendApplied = tally.Pending{}
	}
	if e.pend.Used() {
		sh.orphans = append(sh.orphans, c.delta(e, &e.pend, false, own))
		e.pend = tally.Pending{}
	}
	if ws == w.cur.Start+W {
		w.prev = w.cur
	} else {
		w.prev = estimate.Window{}
	}
	w.cur = estimate.Window{Start: ws}
	e.answerRemaining, e.sinceAnswer = -1, 0 // nothing known of the new window yet
	if e.overUntil <= ws {
		e.overUntil = 0
	}
	e.room, e.roomUntil = 0, 0
}

func (w *windowCounter) look(c *Checker, e *entry, now, _ int64, lk *look) {
	r := e.rule
	lk.ceiling, lk.pred, lk.post = r.Ceiling(), e.InFlight(c.cfg.PipelineLag)+c.othersAllowance(e), limiter.State{} // (try: a bucket's only)
	if !w.cur.Known {
		lk.pred += e.Others * min(now-w.cur.Start, int64(r.Window)) / int64(time.Second)
	}
	lk.mine = w.curMine(e.x)
	if r.Algorithm != config.AlgSlidingWindow {
		lk.used = lk.mine + w.curOthers(e.x)
		lk.remaining = max(0, lk.ceiling-lk.used)
		return
	}
	sc := w.slidingCounts(e, now)
	lk.used, lk.remaining = sc.Cur, sc.Remaining(lk.ceiling)
}

// view is the key's look for no cost (a report).
func (w *windowCounter) view(c *Checker, e *entry, now int64) look {
	var lk look
	w.look(c, e, now, 0, &lk)
	return lk
}

// slidingCounts is a sliding window key's counts at now: the previous
// window only when it is the one just before.
func (w *windowCounter) slidingCounts(e *entry, now int64) limiter.SlidingCounts {
	W := int64(e.rule.Window)
	sc := limiter.SlidingCounts{Cur: w.curMine(e.x) + w.curOthers(e.x), Elapsed: now - w.cur.Start, Window: W}
	if w.prev.Start == w.cur.Start-W {
		sc.Prev = w.prev.Mine() + w.prev.Others()
	}
	return sc
}

// judge: Envoy's window charges every call, and reports the counter
// after it whatever the answer.
func (w *windowCounter) judge(c *Checker, e *entry, lk *look, now, cost int64, capped bool) verdict {
	r := e.rule
	fits := cost <= lk.ceiling
	// (a floored remaining decides as the exact weighted comparison; the
	// prediction chose the band, not the answer: no refusal on a guess)
	v := verdict{allowed: fits && cost <= lk.remaining && !capped, remaining: lk.remaining}
	v.resetBefore = w.reset(e, now, 0)
	v.resetAfter = v.resetBefore
	if v.allowed {
		v.remaining -= cost
		v.resetAfter = w.reset(e, now, cost)
	}
	if !v.allowed {
		v.never = !fits
		if fits {
			v.retryAfter = w.retry(e, lk, now, cost)
		}
		if capped { // a new slice comes with the next store answer
			v.retryAfter = max(v.retryAfter, c.cfg.MinRefresh)
		}
	}
	if r.Algorithm == config.AlgEnvoy {
		v.remaining = max(0, lk.remaining-cost)
		v.resetAfter = time.Duration(w.cur.Start + int64(r.Window) - now)
	}
	if !v.allowed && lk.remaining <= 0 {
		e.overUntil = max(e.overUntil, now+int64(v.retryAfter))
	}
	return v
}

// reset is when the window counter resets once cost more is counted.
func (w *windowCounter) reset(e *entry, now, cost int64) time.Duration {
	if e.rule.Algorithm == config.AlgSlidingWindow {
		sc := w.slidingCounts(e, now)
		sc.Cur += cost
		return time.Duration(sc.ResetAfter())
	}
	if w.curMine(e.x)+w.curOthers(e.x)+cost == 0 {
		return 0
	}
	return time.Duration(w.cur.Start + int64(e.rule.Window) - now)
}

// retry is when cost fits again if nothing else arrives.
func (w *windowCounter) retry(e *entry, lk *look, now, cost int64) time.Duration {
	if e.rule.Algorithm != config.AlgSlidingWindow {
		return time.Duration(w.cur.Start + int64(e.rule.Window) - now)
	}
	return time.Duration(w.slidingCounts(e, now).RetryAfter(lk.ceiling, cost))
}

func (w *windowCounter) state(c *Checker, e *entry, now, cost int64) (int64, time.Duration) {
	return w.view(c, e, now).remaining, w.reset(e, now, cost)
}

func (w *windowCounter) fillCharge(_ *Checker, e *entry, q *counters.ChargeRequest) {
	r := e.rule
	q.Window, q.Ceiling, q.OwnEmitted, q.OtherShards = w.cur.Start, r.Ceiling(), w.cur.Emitted, w.cur.Shards
	q.ChargeDenied = r.Algorithm == config.AlgEnvoy
	if hotNear(e) { // the shared counter: the shards as last read, own unapplied hits included (hot.go)
		q.Key, q.OwnEmitted = e.key, 0
		q.OtherShards = w.cur.Shards + w.cur.Total + max(0, w.cur.Emitted-w.cur.Own)
	}
	if r.Algorithm == config.AlgSlidingWindow {
		q.Sliding = true
		if w.prev.Start == w.cur.Start-int64(r.Window) {
			q.PrevEmitted, q.PrevOtherShards = w.prev.Emitted, w.prev.Shards
		}
	}
}

func (w *windowCounter) absorbCharge(c *Checker, e *entry, now int64, q *counters.ChargeRequest, res *counters.ChargeResult,
	cost int64, charged, allowed bool) learned {
	if w.cur.Start != q.Window { // the window rolled meanwhile: nothing to learn
		if charged && w.prev.Start == q.Window {
			w.prev.Charged += cost // the store counted it in that window
		}
		return learned{rolled: true}
	}
	var chargedNow int64
	if charged {
		chargedNow = cost
	}
	if q.Key != e.skey { // the shared counter of a hot key: its own answer (hot.go)
		w.learnHot(e, q.Window, res.Total, res.Own, res.Base, res.OwnSync-chargedNow)
	} else {
		w.cur.Absorb(res.Total, res.Own, res.Base, res.OwnMem, res.OwnSync, !e.Answered(), chargedNow)
	}
	if q.Sliding && w.prev.Start == w.cur.Start-q.WindowNanos {
		w.prev.Total, w.prev.Own, w.prev.Base, w.prev.Known = res.PrevTotal, res.PrevOwn, res.PrevBase, true
	}
	e.Learn(now, w.curOthers(e.x), w.curMine(e.x), res.Instances)
	w.addCharged(chargedNow)
	lk := w.view(c, e, now)
	l := learned{remaining: lk.remaining, resetAfter: w.reset(e, now, 0), roomUntil: w.cur.Start + int64(e.rule.Window)}
	if !allowed {
		l.never = cost > lk.ceiling
		if !l.never {
			l.retryAfter = w.retry(e, &lk, now, cost)
		}
	}
	return l
}

// reads: the current window and (sliding) the previous.
func (w *windowCounter) reads(c *Checker, e *entry, items []counters.ReadItem, ents []*entry, tags []uint8) ([]counters.ReadItem, []*entry, []uint8) {
	items, ents, tags = w.items(c, items, ents, tags, e, w.cur.Start)
	if e.rule.Algorithm == config.AlgSlidingWindow && w.prev.Start > 0 {
		items, ents, tags = w.items(c, items, ents, tags, e, w.prev.Start)
	}
	return items, ents, tags
}

// items appends the reads of window start: e's own counter and a hot
// key's shared counter and other shards.
func (w *windowCounter) items(c *Checker, items []counters.ReadItem, ents []*entry, tags []uint8, e *entry, start int64) ([]counters.ReadItem, []*entry, []uint8) {
	items = append(items, counters.ReadItem{Key: e.skey, Kind: counters.KindWindow, Window: start})
	ents, tags = append(ents, e), append(tags, tagOwn)
	if hotNear(e) { // the shared counter of its near-band charges
		items = append(items, counters.ReadItem{Key: e.key, Kind: counters.KindWindow, Window: start})
		ents, tags = append(ents, e), append(tags, tagHot)
	}
	if n := e.rule.Shards; n > 1 {
		mine := c.shardOf(n)
		tag := tagOtherFirst
		for j := range n {
			if j != mine {
				items = append(items, counters.ReadItem{Key: counters.ShardKey(e.key, j), Kind: counters.KindWindow, Window: start})
				ents, tags = append(ents, e), append(tags, tag)
				tag = tagOther
			}
		}
	}
	return items, ents, tags
}

func (w *windowCounter) absorbRead(c *Checker, e *entry, it *counters.ReadItem, now int64) (int64, int64, int64, bool) {
	switch it.Window {
	case w.cur.Start:
		w.cur.Absorb(it.Total, it.Own, it.Base, it.OwnMem, it.OwnSync, !e.Answered(), 0)
		e.Learn(now, w.curOthers(e.x), w.curMine(e.x), it.Instances)
	case w.prev.Start:
		w.prev.Total, w.prev.Own, w.prev.Base, w.prev.Known = it.Total, it.Own, it.Base, true
		return 0, 0, 0, false
	default:
		return 0, 0, 0, false // the window rolled while reading
	}
	lk := w.view(c, e, now)
	return lk.remaining, lk.pred, lk.ceiling, true
}

// absorbOther sums another shard into the window's others.
func (w *windowCounter) absorbOther(e *entry, tag uint8, it *counters.ReadItem) {
	if tag == tagHot {
		w.learnHot(e, it.Window, it.Total, it.Own, it.Base, it.OwnSync)
		return
	}
	ws := &w.cur
	if it.Window == w.prev.Start {
		ws = &w.prev
	}
	if tag == tagOtherFirst {
		ws.Shards = 0
	}
	if it.Window == ws.Start {
		ws.Shards += it.Total
	}
}

// bucketCounter is a bucket-kind key's view of its bucket.
type bucketCounter struct {
	estimate.Bucket
}

func (b *bucketCounter) kind() counters.Kind                           { return counters.KindTAT }
func (b *bucketCounter) size() int                                     { return int(unsafe.Sizeof(*b)) }
func (b *bucketCounter) window(*config.Rule) (int64, int64)            { return 0, math.MaxInt64 }
func (b *bucketCounter) known() bool                                   { return true }
func (b *bucketCounter) roll(*Checker, *shard, *entry, int64)          {}
func (b *bucketCounter) addMemory(cost int64)                          { b.Cum += cost }
func (b *bucketCounter) addCharged(cost int64)                         { b.CumCharged += cost }
func (b *bucketCounter) mineMemory() int64                             { return b.Cum }
func (b *bucketCounter) ownCounts() (int64, int64, bool)               { return 0, 0, false }
func (b *bucketCounter) absorbOther(*entry, uint8, *counters.ReadItem) {}

// parkable: never. A charge carries this instance's view of the TAT,
// which an operator's reset makes wrong until a read tells it.
func (b *bucketCounter) parkable(*config.Rule) bool { return false }

func (b *bucketCounter) look(c *Checker, e *entry, now, cost int64, lk *look) {
	g := estimate.GCRA(e.rule)
	// (field by field: zeroing try, which the trial overwrites, costs)
	lk.used, lk.post, lk.ceiling, lk.pred, lk.mine = 0, b.State, g.Burst, e.InFlight(c.cfg.PipelineLag), b.Mine()
	lk.try, _ = g.AllowAt(&lk.post, now, cost)
	lk.remaining = lk.try.Remaining
	if lk.try.Allowed {
		lk.remaining += cost
	}
}

func (b *bucketCounter) judge(c *Checker, e *entry, lk *look, now, cost int64, capped bool) verdict {
	try := lk.try
	v := verdict{allowed: try.Allowed && !capped, resetAfter: try.ResetAfter} // the prediction chose the band, it does not refuse
	if v.allowed {
		v.remaining = try.Remaining
		v.resetBefore = max(0, try.ResetAfter-time.Duration(counters.Span(cost, int64(e.rule.Window), e.rule.Limit)))
		return v
	}
	v.remaining, v.retryAfter = lk.remaining, try.RetryAfter
	if capped { // a new slice comes with the next store answer
		v.retryAfter = max(v.retryAfter, c.cfg.MinRefresh)
		return v
	}
	if lk.remaining == 0 {
		e.overUntil = max(e.overUntil, now+int64(v.retryAfter))
	}
	return v
}

func (b *bucketCounter) state(_ *Checker, e *entry, now, cost int64) (int64, time.Duration) {
	p := b.Peek(e.rule, now, 0)
	if cost > 0 {
		return p.Remaining, b.Peek(e.rule, now, cost).ResetAfter
	}
	return p.Remaining, p.ResetAfter
}

func (b *bucketCounter) admit(e *entry, now, cost int64, post limiter.State, held bool) {
	if held {
		b.State = post
		return
	}
	estimate.GCRA(e.rule).AllowAt(&b.State, now, cost)
}

func (b *bucketCounter) fillCharge(_ *Checker, e *entry, q *counters.ChargeRequest) {
	g := estimate.GCRA(e.rule)
	q.Burst, q.RateTokens, q.OwnCum, q.LocalTAT = g.Burst, e.rule.Limit, b.Cum, g.TAT(&b.State)
}

func (b *bucketCounter) absorbCharge(c *Checker, e *entry, now int64, _ *counters.ChargeRequest, res *counters.ChargeResult,
	cost int64, charged, allowed bool) learned {
	r := e.rule
	if !e.Answered() {
		var chargedNow int64
		if charged {
			chargedNow = cost
		}
		b.Rebase(res.OwnMem, res.OwnSync, chargedNow)
	}
	if charged {
		estimate.GCRA(r).AllowAt(&b.State, now, cost) // own exact view, before the store's raise
		b.addCharged(cost)
	}
	b.Absorb(r, true, res.Total, res.Cum, res.Own, res.OwnMem, res.Gen, now)
	e.Learn(now, b.Others(), b.Mine(), res.Instances)
	probe := b.Peek(r, now, 0)
	// a bucket's room grows: trust it for one token's time only
	l := learned{remaining: probe.Remaining, resetAfter: probe.ResetAfter, roomUntil: now + counters.Span(1, int64(r.Window), r.Limit)}
	if !allowed {
		if d := b.Peek(r, now, cost); !d.Allowed {
			l.retryAfter, l.never = d.RetryAfter, d.RetryNever()
		}
	}
	return l
}

func (b *bucketCounter) reads(_ *Checker, e *entry, items []counters.ReadItem, ents []*entry, tags []uint8) ([]counters.ReadItem, []*entry, []uint8) {
	return append(items, counters.ReadItem{Key: e.skey, Kind: counters.KindTAT}), append(ents, e), append(tags, tagOwn)
}

func (b *bucketCounter) absorbRead(c *Checker, e *entry, it *counters.ReadItem, now int64) (int64, int64, int64, bool) {
	if !e.Answered() {
		b.Rebase(it.OwnMem, it.OwnSync, 0)
	}
	b.Absorb(e.rule, it.Found, it.Total, it.Cum, it.Own, it.OwnMem, it.Gen, now)
	e.Learn(now, b.Others(), b.Mine(), it.Instances)
	return b.Peek(e.rule, now, 0).Remaining, e.InFlight(c.cfg.PipelineLag), e.rule.Capacity(), true
}

func (b *bucketCounter) fillDelta(e *entry, d *eventsv1.Delta) {
	g := estimate.GCRA(e.rule)
	d.RateTokens, d.Burst, d.TatAfterUnixNanos = e.rule.Limit, g.Burst, g.TAT(&b.State)
}
