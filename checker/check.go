package checker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Check decides req into d, reusing d.Statuses' capacity. Far from every
// limit it touches only memory and allocates nothing; near a limit it makes
// one atomic store call per descriptor that needs one. It returns an error
// only for a malformed request (a *FieldError) or an internal fault.
func (c *Checker) Check(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision) error {
	// Working memory: on the stack for the common small request (zeroing a
	// few slots is cheaper than a pool round trip), pooled for large ones.
	if len(req.Descriptors) <= smallRequest {
		var slots [smallRequest]slot
		var locks [smallRequest]int
		var matched [smallRequest]*config.Rule
		var bufp *[]byte // taken from the pool only for local-mode keys
		err := c.check(ctx, req, d, slots[:], locks[:0], matched[:], &bufp)
		if bufp != nil {
			c.keyBufs.Put(bufp)
		}
		if err == errMoreSlots { // elastic rules' pools did not fit
			return c.checkLarge(ctx, req, d)
		}
		return err
	}
	return c.checkLarge(ctx, req, d)
}

// checkLarge decides with pooled working memory: requests of many
// descriptors, or whose pools need more slots than the stack gives.
func (c *Checker) checkLarge(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision) error {
	sc := c.scratch.Get().(*scratch)
	defer c.scratch.Put(sc)
	bufp := &sc.buf
	return c.check(ctx, req, d, sc.slots[:], sc.locks[:0], sc.matched[:], &bufp)
}

// errMoreSlots asks Check to decide again with pooled working memory.
var errMoreSlots = errors.New("checker: more slots needed")

// smallRequest is the most descriptors decided with stack memory.
const smallRequest = 4

func (c *Checker) check(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision, slotBuf []slot, locks []int,
	matchBuf []*config.Rule, buf **[]byte) error {
	rs := c.rules.Load()
	dom, known := rs.Lookup(req.Domain)
	if err := req.ValidateBounds(known, &c.cfg.Bounds); err != nil {
		return err
	}
	now := c.clock.Now()
	fp, done, err := c.ids.Replay(req, now, d)
	if err != nil || done {
		return err
	}
	n := len(req.Descriptors)
	d.Statuses = slices.Grow(d.Statuses[:0], n)[:n]
	matched := matchRules(dom, req, matchBuf[:n])
	config.DropReplaced(matched)
	if !req.Prehashed {
		req = c.applyHashing(req, matched)
	}
	if cs := c.controls.Load(); cs != nil {
		if m := cs.domains[req.Domain]; m != nil {
			c.applyControls(m, req, matched, now)
		}
	}

	pools := 0
	for _, r := range matched {
		if r != nil && r.Pool != nil {
			pools++
		}
	}
	if n+pools > len(slotBuf) {
		return errMoreSlots // nothing changed yet: decided again with more room
	}
	slots := slotBuf[:n]
	c.keys(buf, req, matched, slots)
	if pools > 0 {
		slots = c.poolSlots(slotBuf, slots, req)
	}

	for i := range slots { // ascending and unique: shards are always locked in one order
		if s := &slots[i]; s.sh >= 0 {
			if len(locks) == 0 {
				locks = append(locks, s.sh)
			} else if j, found := slices.BinarySearch(locks, s.sh); !found {
				locks = slices.Insert(locks, j, s.sh)
			}
		}
	}
	c.lock(locks)
	denied, sync := false, false
	for i := range slots {
		s := &slots[i]
		if s.dupOf >= 0 {
			continue // decided with the descriptor it repeats
		}
		if s.pool && !c.borrowing(s, slots) {
			continue // nobody borrows: nothing to decide
		}
		c.decide(s, req, now)
		switch {
		case s.need == needSync:
			sync = true
		case !s.allowed && !s.shadowed && s.need != needNone:
			denied = true
		}
	}
	if sync {
		c.unlock(locks)
		// each store call has StoreTimeout (a slow store costs a request
		// at most that per call, then the failure policy decides)
		denied = c.charge(slots, denied, req, now)
		c.lock(locks)
		c.applyCharges(slots, now)
		defer c.releaseWork(slots)
	}
	// The request's answer, before the commit counts each descriptor's
	// decision as it. A pool's refusal is its borrowers' before anyone
	// asks whether the request defers: a borrower refused by its pool is
	// refused by its own rule, which may not defer (issue 19: a spent
	// pool answered defer under rules that deny, and the ticket failed in
	// the drain).
	if pools > 0 {
		refusedByPool(slots, n)
	}
	d.Code = ratelimit.OK
	if denied {
		d.Code = ratelimit.OverLimit
		if deferring(slots[:n]) {
			d.Code = ratelimit.Deferred
		}
	}
	c.commit(slots, denied, d.Code == ratelimit.Deferred, !sync, now)
	if len(locks) > 0 {
		st := &c.shards[locks[0]].stats
		st.decisions++
		if denied {
			st.denied++
		}
	} else {
		c.Stats.unsharded.Add(1)
		if denied {
			c.Stats.unshardedDenied.Add(1)
		}
	}
	c.unlock(locks)

	for i := range n {
		if p := slots[i].dupOf; p >= 0 {
			d.Statuses[i] = d.Statuses[p]
			continue
		}
		c.status(&d.Statuses[i], &slots[i], denied, now)
		if d.Code == ratelimit.Deferred && d.Statuses[i].Code == ratelimit.OverLimit {
			d.Statuses[i].Code = ratelimit.Deferred
		}
	}
	c.ids.Remember(req, fp, now, d)
	if c.dirtyN.Load() >= int64(c.cfg.FlushThreshold) {
		select {
		case c.flushNow <- struct{}{}:
		default:
		}
	}
	return nil
}

func (c *Checker) lock(idx []int) {
	for _, i := range idx {
		c.shards[i].mu.Lock()
	}
}

func (c *Checker) unlock(idx []int) {
	for j := len(idx) - 1; j >= 0; j-- {
		c.shards[idx[j]].mu.Unlock()
	}
}

// decide makes the memory part of one descriptor's decision, or prepares
// its store charge (requires the slot's shard lock).
func (c *Checker) decide(s *slot, req *ratelimit.Request, now int64) {
	r, cost := s.rule, s.cost
	switch {
	case r == nil || r.Unlimited:
		s.need, s.allowed = needNone, true
		return
	case r.Limit == 0: // Envoy's block, or an operator's deny control
		s.need, s.never = needMemory, true
		s.resetAfter = time.Duration(limiter.WindowStart(now, int64(r.Window)) + int64(r.Window) - now)
		s.shadowed = r.Shadow
		c.blockedEntry(s, req, now)
		return
	}
	sh := &c.shards[s.sh]
	e := sh.lookup(s.h, r, s.entriesOf(req))
	if e != nil && e.kind != kindOf(r) {
		// the entry a blocked counter's refusals were counted in (or a
		// reload changed the rule's algorithm): its state is of another
		// kind, so the counter starts afresh from the store
		c.dropEntry(sh, e, now)
		e = nil
	}
	if e == nil {
		e = c.create(sh, s, req, now)
	}
	s.e, e.rule, e.used, e.active = e, r, now, true
	if e.parked { // used again: its view is stale; near until the store answers, and read soon
		e.parked, e.stale = false, true
		sh.parkedStale++
		sh.schedule(e, now+int64(c.cfg.MinRefresh))
	}
	if e.kind == counters.KindWindow {
		c.roll(sh, e, now)
	}
	if r.Mode == config.ModeLocal { // the limiter decides; the entry takes the decision to the analytics
		c.decideLocal(s, now, cost)
		return
	}
	s.need = needMemory
	switch {
	case r.Algorithm != config.AlgEnvoy && cost > r.Capacity(): // can never fit: no store call
		// (commit counts the refusal for analytics, once)
		s.allowed, s.never, s.shadowed = false, true, r.Shadow
		c.fillView(s, now)
		s.remaining = 0 // as the exact limiter reports a cost it can never admit
		c.emitSoon(sh, e, now, 0, -1)
		return
	case r.Mode == config.ModeSync:
		c.prepareExact(s, req, cost)
		return
	}
	var v view
	var try limiter.Decision
	var remaining, pred, ceiling int64
	if e.kind == counters.KindWindow {
		v = c.windowView(e, now)
		remaining, pred, ceiling = v.remaining, v.pred, v.ceiling
	} else {
		// One evaluation serves the band, the decision and the commit: the
		// state after the charge is kept in the slot.
		g := gcraOf(r)
		s.post = e.gs
		try, _ = g.AllowAt(&s.post, now, cost)
		remaining, ceiling = try.Remaining, g.Burst
		if try.Allowed {
			remaining += cost
		}
		pred = c.inFlight(e)
	}
	if r.Pool != nil { // elastic: over its own limit it borrows (judged from this view)
		s.setAbove(ceiling-remaining+cost, cost)
	}
	// Over band: a store answer said there is no room (for this cost), and
	// what this instance knows agrees. Refused from memory: abusive traffic
	// costs no store calls. (A probe, cost 0, always passes.)
	// (a stale view's refusal is not trusted: a reset or a new limit may
	// have made room since)
	over := !e.stale && (e.overUntil > now || (cost > e.room && now < e.roomUntil))
	farRoom := int64(-1) // the far band's margin, for emitSoon; -1: not far
	switch {
	case over && cost > 0 && (cost > remaining || e.restored && !e.answered):
		// (a key evicted while over and created again knows nothing yet
		// but that it was over)
		sh.stats.over++
		c.denyFromMemory(s, now, cost)
	default:
		// Until two store answers have taught the key's global rate, the
		// others' in-flight consumption cannot be bounded: stay near.
		th := c.threshold(e, ceiling)
		room := remaining - pred - cost - th
		// A young key stays near: its other users may not have reached the
		// store yet (two checkers starting together each see one instance),
		// and two answers are needed before its rate is known.
		if room < 0 || e.answers < 2 || e.stale || now-e.created < int64(c.cfg.MinRefresh+c.cfg.PipelineLag) ||
			e.x != nil && e.x.lagging {
			sh.stats.near++
			if r.NearLimit == config.NearSync {
				c.prepareCharge(s, now, cost)
				return
			}
			// near_limit: async spends only this instance's slice of what
			// remained (bands.go)
			s.capped = c.capped(e, now, cost, remaining, ceiling)
		} else {
			sh.stats.far++
			farRoom = room
			// Re-read before the key can reach its band at the rate it goes
			// now: a key that speeds up is refreshed sooner than the
			// refresher planned. Checked once per live-rate window.
			if e.recheck {
				e.recheck = false
				if rate := c.rate(e); rate > 0 {
					// room × 1 s in 128 bits: a limit near the int64 bound has room for it
					if wait := max(mulDiv(room, int64(time.Second), 2*rate), int64(c.cfg.RefreshTick)); wait < e.nextRefresh-now {
						sh.schedule(e, now+wait)
					}
				}
			}
		}
		if e.kind == counters.KindWindow {
			c.decideWindow(s, v, now, cost)
		} else {
			c.decideTAT(s, try, remaining, now, cost)
		}
	}
	if !s.allowed && r.Shadow {
		s.shadowed = true
	}
	c.emitSoon(sh, e, now, cost, farRoom)
}

// blockedEntry gives a refusal of a blocked counter (requests_per_unit 0,
// a deny control) the key's entry, so that commit counts it in the
// analytics like any refusal: a blocked client hammering is exactly what
// the top-denied keys must show. Nothing is charged or decided with it;
// an entry the counter already has keeps its rule (lifting a control
// finds it as it was), and a new one is a window counter of the blocked
// rule, which nothing but its analytics ever uses.
func (c *Checker) blockedEntry(s *slot, req *ratelimit.Request, now int64) {
	sh := &c.shards[s.sh]
	e := sh.lookup(s.h, s.rule, s.entriesOf(req))
	if e == nil {
		e = c.create(sh, s, req, now)
	}
	if e.parked { // back in the heap, where its idle eviction happens
		e.parked, e.stale = false, true
		sh.parkedStale++
		sh.schedule(e, now+int64(c.cfg.MinRefresh))
	}
	s.e, e.used, e.active = e, now, true
	if e.kind == counters.KindWindow {
		c.roll(sh, e, now)
	}
	c.emitSoon(sh, e, now, 0, -1)
}

// denyFromMemory refuses while a key is known to be over its limit: no
// store call. Envoy-semantics rules still count the call.
func (c *Checker) denyFromMemory(s *slot, now, cost int64) {
	e := s.e
	s.allowed = false
	s.retryAfter = time.Duration(max(e.overUntil, e.roomUntil) - now)
	s.never = cost > s.rule.Capacity()
	if e.kind == counters.KindWindow {
		v := c.windowView(e, now)
		s.remaining = v.remaining
		s.resetAfter = c.windowReset(e, now, false, 0)
		if s.rule.Algorithm == config.AlgEnvoy {
			s.charged = true
			c.count(s, now, cost, false)
			s.remaining = max(0, v.remaining-cost)
		}
	} else {
		probe := peek(e, now, 0)
		s.remaining, s.resetAfter = probe.Remaining, probe.ResetAfter
	}
}

// decideLocal runs a `mode: local` rule on the in-process limiter: Envoy
// rules are charged now, algorithm rules peeked and charged at commit
// (requires the lock of s.e, which only carries the decisions to the
// analytics: no store call, no read).
func (c *Checker) decideLocal(s *slot, now, cost int64) {
	s.need = needLocal
	var ld limiter.Decision
	var err error
	if s.rule.Algorithm == config.AlgEnvoy {
		ld, err = c.local.AllowAt(s.key, s.rule.Limiter, now, cost, "")
		s.charged = true
	} else {
		ld, err = c.local.PeekAt(s.key, s.rule.Limiter, now, cost)
		s.local = true
	}
	if err != nil && !errors.Is(err, limiter.ErrCostExceedsLimit) {
		// parameters the config validated; a time out of range is the only way here
		s.allowed, s.never = false, true
		return
	}
	s.allowed, s.remaining, s.resetAfter = ld.Allowed, ld.Remaining, max(ld.ResetAfter, 0)
	s.never = ld.RetryNever()
	if !ld.Allowed {
		s.retryAfter = max(ld.RetryAfter, 0)
		s.shadowed = s.rule.Shadow
	}
}

// rateSpan is the shortest interval a rate is measured over.
const rateSpan = 10 * time.Millisecond

// commit records the memory decisions of algorithm rules once the request
// stands (requires the locks): a refused request charges them nothing.
// Every decision not counted yet is counted now, as the request was
// answered (deferred: it was deferred).
//
// held says the locks were held since the decisions: a bucket's state
// computed then is still current and is stored as is.
func (c *Checker) commit(slots []slot, denied, deferred, held bool, now int64) {
	for i := range slots {
		s := &slots[i]
		cost := s.cost
		switch later := s.later; {
		case later != laterNone:
			s.later = laterNone
			if later == laterRefused {
				c.countRefused(s, s.e, now, cost, deferred)
				break
			}
			// a sync decision refunded because another rule refused is
			// refused (charged: the counter holds it — Envoy's semantics,
			// or a refund that failed)
			c.countAnalytics(s, now, cost, s.allowed && (!denied || s.charged), deferred)
		case s.need == needLocal:
			allowed := s.allowed // Envoy's semantics: charged as decided, whatever the request's fate
			if s.local {
				allowed = !denied && s.allowed
				if allowed {
					ld, _ := c.local.AllowAt(s.key, s.rule.Limiter, now, cost, "")
					s.remaining = ld.Remaining
				}
			}
			c.countAnalytics(s, now, cost, allowed, deferred)
			c.emitSoon(&c.shards[s.sh], s.e, now, 0, -1)
		case s.need == needMemory && s.e != nil && !s.charged:
			e := s.e
			if !denied && s.allowed {
				c.count(s, now, cost, true)
				e.pend.above(s)
				if e.kind == counters.KindTAT {
					if held {
						e.gs = s.post
					} else {
						gcraOf(s.rule).AllowAt(&e.gs, now, cost)
					}
				}
			} else {
				c.countRefused(s, e, now, cost, deferred)
			}
		}
	}
}

// status fills one descriptor's status from its slot.
func (c *Checker) status(st *ratelimit.Status, s *slot, denied bool, now int64) {
	cost := s.cost
	*st = ratelimit.Status{Code: ratelimit.OK, Rule: s.rule}
	r := s.rule
	if r == nil || r.Unlimited || s.need == needNone {
		return
	}
	st.Limit = r.Limit
	over := r.Ceiling() - r.Limit
	rem := s.remaining
	// A peek reported what would remain after the request; nothing was
	// charged after all. (Store answers already describe the counter as it is.)
	if denied && s.allowed && !s.charged && (s.need == needMemory || s.need == needLocal || s.skipped || s.exact) {
		rem += cost
		if s.need == needMemory {
			s.resetAfter = s.resetBefore
		}
	}
	st.Remaining = max(rem-over, 0)
	st.ResetAfter = max(s.resetAfter, 0)
	if st.ResetAfter == 0 { // the counter is fresh: say when it would reset
		st.ResetAfter = freshReset(r, now)
	}
	st.Degraded = s.degraded
	switch {
	case !s.allowed && s.shadowed:
		st.Shadowed = true
	case !s.allowed:
		st.Code = ratelimit.OverLimit
		st.RetryNever = s.never
		if !s.never {
			st.RetryAfter = max(s.retryAfter, 0)
		}
	case r.Pool != nil:
		st.Elastic = s.borrow && !denied // a refused request borrowed nothing
	default:
		st.OverSoft = overSoft(r, rem)
	}
}

// scratch is the per-Check working memory, pooled.
type scratch struct {
	buf     []byte
	slots   [2 * config.MaxDescriptors]slot // a descriptor's slot, and its pool's
	locks   [2 * config.MaxDescriptors]int
	matched [config.MaxDescriptors]*config.Rule
}

// need says how a descriptor is decided.
type need uint8

const (
	needNone   need = iota // no rule, unlimited: allowed, nothing to count
	needMemory             // decided from memory
	needSync               // an atomic store charge
	needLocal              // mode local: the in-process limiter
)

// slot is one descriptor's work in a Check.
type slot struct {
	rule  *config.Rule
	key   string // aliases the pooled key buffer
	idx   int    // the descriptor's index in the request
	cost  int64  // the request's hits times the descriptors naming this counter
	dupOf int    // >= 0: another descriptor of the request names the same counter
	h     uint64
	sh    int
	e     *entry
	need  need
	local bool // mode local with an algorithm: peeked, charged at commit

	allowed    bool // this descriptor admits the request
	capped     bool // near_limit: async, past this instance's slice: refused from memory
	budgetOK   bool // local_budget would admit it if the store is down
	skipped    bool // a store charge not made: the request was already refused
	exact      bool // mode: sync, run whole by the store (counters.SyncStore)
	charged    bool // consumption already recorded (Envoy semantics, sync)
	degraded   bool
	shadowed   bool
	remaining  int64 // against the ceiling, after this request
	resetAfter time.Duration
	retryAfter time.Duration
	never      bool

	// Pools and deferral: deferrable is a refusal deferred
	// (`on_exceed: defer`, not a release); pool marks the slot of an
	// elastic rule's pool, decided after its borrowers (entries: the
	// pool's counter), poolSlot (>= 0) is a borrower's pool slot, and
	// borrow says the borrower goes over its own limit, by above hits
	// (what the pool pays: the part of cost beyond the limit, not all of it).
	deferrable, pool, borrow bool
	above                    int64
	// release: the drain's decision on a deferred request; its refusals
	// ("not yet") are not refusals of anyone's request, so analytics do
	// not count them (the request was counted deferred once)
	release  bool
	poolSlot int
	entries  []config.Entry

	w     *syncWork  // the store charge, when one is made
	later countLater // the analytics tally that waits for the request's answer
	// resetBefore is the reset as things stand, reported when the request
	// is refused by another descriptor and nothing is charged here.
	resetBefore time.Duration
	// post is a bucket key's state after this request's charge, computed
	// once by the decision and stored by the commit.
	post limiter.State
}
