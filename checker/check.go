package checker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Check decides req into d, reusing d.Statuses' capacity. Far from every
// limit it touches only memory and allocates nothing; near one it makes an
// atomic store call per descriptor that needs one. Its error is a
// malformed request's (a *FieldError) or an internal fault.
func (c *Checker) Check(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision) error {
	rs := c.rules.Load()
	if rs.IsStaged(req.Domain) { // staged rules answer nobody: no client may ask them
		return &ratelimit.FieldError{Field: "domain", Err: fmt.Errorf("%w %q", ratelimit.ErrUnknownDomain, req.Domain)}
	}
	if req.Charge && len(req.Descriptors) == 0 { // a charge naming its check's id
		creq := *req
		if err := c.ids.Recall(&creq, c.clock.Now()); err != nil {
			return err
		}
		req = &creq
	}
	replayed, err := c.checkOne(ctx, req, d)
	if err == nil && !replayed && !req.Release && !req.Prehashed {
		if staged, ok := rs.Staged(req.Domain); ok {
			c.checkStaged(ctx, req, staged)
		}
	}
	return err
}

// checkStaged decides req under the domain's staged rules too (a version
// being rolled out in shadow): counted, reported in analytics under the
// staged domain, and the answer thrown away.
func (c *Checker) checkStaged(ctx context.Context, req *ratelimit.Request, staged string) {
	sreq := *req
	sreq.Domain, sreq.RequestID = staged, "" // its own decision, never a replay of the live one
	sd := c.stagedDecisions.Get().(*ratelimit.Decision)
	if _, err := c.checkOne(ctx, &sreq, sd); err != nil {
		c.Stats.StagedErrors.Add(1)
	}
	c.stagedDecisions.Put(sd)
}

// checkOne decides req into d; replayed: d is a request id's answer
// remembered, nothing was decided.
func (c *Checker) checkOne(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision) (replayed bool, err error) {
	// working memory on the stack for small requests (zeroing a few slots
	// costs less than a pool round trip), pooled for large ones
	var bufp *[]byte // taken from the pool only for local-mode keys
	switch n := len(req.Descriptors); {
	case n <= 1:
		var slots [2]slot
		var locks [2]int
		var matched [1]*config.Rule
		replayed, err = c.check(ctx, req, d, slots[:], locks[:0], matched[:], &bufp)
	case n <= smallRequest:
		var slots [smallRequest]slot
		var locks [smallRequest]int
		var matched [smallRequest]*config.Rule
		replayed, err = c.check(ctx, req, d, slots[:], locks[:0], matched[:], &bufp)
	default:
		return c.checkLarge(ctx, req, d)
	}
	if bufp != nil {
		c.keyBufs.Put(bufp)
	}
	if err == errMoreSlots { // elastic rules' pools or further limits did not fit
		return c.checkLarge(ctx, req, d)
	}
	return replayed, err
}

// checkLarge decides with pooled working memory (many descriptors, or
// pools that need more slots than the stack gives).
func (c *Checker) checkLarge(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision) (bool, error) {
	sc := c.scratch.Get().(*scratch)
	defer c.scratch.Put(sc)
	clear(sc.slots[:min(config.MaxLimitsPerDescriptor*len(req.Descriptors), len(sc.slots))]) // keys expects zero slots, as the stack's are
	bufp := &sc.buf
	return c.check(ctx, req, d, sc.slots[:], sc.locks[:0], sc.matched[:], &bufp)
}

// errMoreSlots asks Check to decide again with pooled working memory.
var errMoreSlots = errors.New("checker: more slots needed")

const smallRequest = 4

// pass is one Check's state through its phases: prepare (match, key, lock
// order), decide (from memory, or a store call readied), settle (store
// calls, the answer, the commit) and report. Only check, where it is a
// local, stores the stack's slots and locks in it (a pointer stored
// through a pointer counts as leaked; the request's too).
type pass struct {
	now    int64
	fp     uint64 // the request id's fingerprint
	slots  []slot // the descriptors' (the first n), then their further limits' and their pools'
	n      int
	pools  int
	extras int   // slots of descriptors' further limits (config.Rule.Extra)
	locks  []int // the shards to lock, ascending and unique
	denied bool  // a rule refuses the request
	sync   bool  // a descriptor needs a store call
	code   ratelimit.Code
	done   bool // answered already (a replayed request id)
	late   bool // a late charge: no admission, so no status is over soft or elastic
}

func (c *Checker) check(ctx context.Context, req *ratelimit.Request, d *ratelimit.Decision, slotBuf []slot, locks []int,
	matchBuf []*config.Rule, buf **[]byte) (replayed bool, err error) {
	var p pass
	orig := req // as asked, before hash_values: what its id remembers
	slots, locks, req, err := c.prepare(&p, req, d, slotBuf, locks, matchBuf, buf)
	if p.done || err != nil {
		return p.done && err == nil, err
	}
	p.slots, p.locks = slots, locks
	if req.View != nil {
		for i := range p.slots {
			p.slots[i].quiet = true
		}
	}
	if req.Charge || req.ReleaseLeases {
		if req.Charge {
			err = c.late(ctx, &p, req)
		} else {
			err = c.releaseLeases(ctx, &p, req)
		}
		if err != nil {
			c.ids.Abandon(orig, p.fp) // nothing counted: a retry decides afresh
			return false, err
		}
		c.report(&p, orig, req, d)
		return false, nil
	}
	c.lock(p.locks)
	c.decideAll(&p, req)
	c.settle(&p, req)
	if req.View != nil {
		c.fillView(&p, req.View)
	}
	c.unlock(p.locks)
	if p.sync {
		c.releaseWork(p.slots)
	}
	c.report(&p, orig, req, d)
	return false, nil
}

// prepare validates the request, answers a replayed request id (done),
// matches rules, hashes values (the request returned), applies controls
// and keys every descriptor and pool; errMoreSlots: slotBuf is too small.
func (c *Checker) prepare(p *pass, req *ratelimit.Request, d *ratelimit.Decision, slotBuf []slot, locks []int,
	matchBuf []*config.Rule, buf **[]byte) ([]slot, []int, *ratelimit.Request, error) {
	p.done = true
	rs := c.rules.Load()
	dom, known := rs.Lookup(req.Domain)
	if err := req.ValidateBounds(known, &c.cfg.Bounds); err != nil {
		return nil, nil, req, err
	}
	p.now = c.clock.Now()
	fp, done, err := c.ids.Replay(req, p.now, d)
	if err != nil || done {
		return nil, nil, req, err
	}
	p.fp, p.n = fp, len(req.Descriptors)
	d.Statuses = slices.Grow(d.Statuses[:0], p.n)[:p.n]
	matched := req.Match(dom, matchBuf[:p.n])
	config.DropReplaced(matched)
	if pt := c.cfg.Plans; pt != nil { // a client's plan, by its values as sent (before hash_values)
		for i, r := range matched {
			if r != nil && r.Plans != nil {
				matched[i] = pt.Resolve(r, req.Descriptors[i].Entries)
			}
		}
	}
	if !req.Prehashed {
		req = c.hashed(req, c.hash.Request(req, matched))
	}
	if n := c.ctl.Current().Apply(req, matched, p.now); n > 0 {
		c.Stats.Controlled.Add(uint64(n))
	}
	for _, r := range matched {
		if r != nil && r.Pool != nil {
			p.pools++
		}
		if r != nil {
			p.extras += len(r.Extra)
		}
	}
	if p.n+p.pools+p.extras > len(slotBuf) {
		c.ids.Abandon(req, p.fp)           // decided again with more room, which claims the id again
		return nil, nil, req, errMoreSlots // nothing changed yet
	}
	slots := slotBuf[:p.n]
	c.keys(buf, req, matched, slots)
	if p.extras > 0 {
		slots = c.extraSlots(slotBuf, slots, req)
	}
	if p.pools > 0 {
		slots = c.poolSlots(slotBuf, slots, req)
	}
	for i := range slots { // ascending and unique: shards are always locked in one order
		switch s := &slots[i]; {
		case s.sh < 0:
		case len(locks) == 0: // the common one-shard request: no search
			locks = append(locks, s.sh)
		default:
			if j, found := slices.BinarySearch(locks, s.sh); !found {
				locks = slices.Insert(locks, j, s.sh)
			}
		}
	}
	p.done = false
	return slots, locks, req, nil
}

// decideAll decides every slot (requires the locks).
func (c *Checker) decideAll(p *pass, req *ratelimit.Request) {
	for i := range p.slots {
		s := &p.slots[i]
		if s.dupOf >= 0 {
			continue // decided with the descriptor it repeats
		}
		if s.role == rolePool && !c.borrowing(s, p.slots) {
			continue // nobody borrows: nothing to decide
		}
		c.decide(s, req, p.now)
		switch {
		case s.stored():
			p.sync = true
		case !s.allowed && !s.shadowed && s.need != needNone:
			p.denied = true
		}
	}
}

// settle makes the store calls, locks dropped, answers the request and
// commits its decisions (requires the locks).
func (c *Checker) settle(p *pass, req *ratelimit.Request) {
	if p.sync {
		c.unlock(p.locks)
		p.denied = c.charge(p.slots, p.denied, req, p.now)
		c.lock(p.locks)
		c.applyCharges(p.slots, p.now)
	}
	// A pool's refusal is its borrowers' before the request may defer: a
	// spent pool must not answer defer under rules that deny.
	if p.pools > 0 {
		refusedByPool(p.slots, p.n)
	}
	p.code = ratelimit.OK
	if p.denied {
		p.code = ratelimit.OverLimit
		if deferring(p.slots[:p.n]) {
			p.code = ratelimit.Deferred
		}
	}
	c.commit(p.slots, req, p.denied, p.code == ratelimit.Deferred, !p.sync, p.now)
	if len(p.locks) > 0 {
		st := &c.shards[p.locks[0]].stats
		st.decisions++
		if p.denied {
			st.denied++
		}
		return
	}
	c.Stats.unsharded.Add(1)
	if p.denied {
		c.Stats.unshardedDenied.Add(1)
	}
}

// report fills the statuses, remembers the request id's answer (to orig,
// req as asked) and wakes the flusher when enough keys wait.
func (c *Checker) report(p *pass, orig, req *ratelimit.Request, d *ratelimit.Decision) {
	d.Code = p.code
	for i := range p.n {
		if j := p.slots[i].dupOf; j >= 0 {
			d.Statuses[i] = d.Statuses[j]
			continue
		}
		c.status(&d.Statuses[i], &p.slots[i], p.denied, p.now)
		if p.late {
			d.Statuses[i].OverSoft, d.Statuses[i].Elastic = false, false
		}
		if p.extras > 0 {
			c.mergeExtras(&d.Statuses[i], p, i)
		}
		if d.Code == ratelimit.Deferred && d.Statuses[i].Code == ratelimit.OverLimit {
			d.Statuses[i].Code = ratelimit.Deferred
		}
	}
	if holdsLease(d) {
		// a retry must not be told it holds a lease that expired or was
		// released meanwhile: it acquires again (the first lease expires)
		c.ids.Abandon(orig, p.fp)
	} else {
		c.ids.Remember(orig, p.fp, p.now, d)
	}
	if c.dirtyN.Load() >= int64(c.cfg.FlushThreshold) {
		select {
		case c.flushNow <- struct{}{}:
		default:
		}
	}
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

// decide makes one descriptor's decision from memory, or readies its
// store call (requires its lock): the key's view is placed in a band.
func (c *Checker) decide(s *slot, req *ratelimit.Request, now int64) {
	if s.rule != nil && s.rule.Algorithm == config.AlgConcurrency && s.cost > 1 {
		s.cost = 1 // a request holds one lease whatever its hits
	}
	r, cost := s.rule, s.cost
	switch {
	case r == nil || r.Unlimited:
		s.need, s.allowed = needNone, true
		return
	case r.Limit == 0: // Envoy's block, or an operator's deny control
		s.need, s.never, s.shadowed = needMemory, true, r.Shadow
		s.resetAfter = time.Duration(limiter.WindowStart(now, int64(r.Window)) + int64(r.Window) - now)
		sh := &c.shards[s.sh]
		c.emitSoon(sh, c.entryFor(sh, s, req, now, true), now, 0, -1)
		return
	}
	sh := &c.shards[s.sh]
	e := sh.lookup(s.h, r, s.entriesOf(req))
	if e == nil && c.compactFirst(sh, s, now) {
		return // a compact key: its record took the hits
	}
	e = c.ready(sh, s, e, req, now, false)
	switch {
	case r.Mode == config.ModeLocal: // the limiter decides; the entry carries it to the analytics
		c.decideLocal(s, now, cost)
		return
	case r.Algorithm != config.AlgEnvoy && cost > r.Capacity(): // never fits: no store call (commit counts it)
		s.need, s.allowed, s.never, s.shadowed = needMemory, false, true, r.Shadow
		s.remaining, s.resetAfter = e.ctr.state(c, e, now, 0)
		s.remaining = 0 // as the exact limiter reports a cost it can never admit
		c.emitSoon(sh, e, now, 0, -1)
		return
	case r.Mode == config.ModeSync:
		c.prepareExact(s, req, cost, now)
		return
	}
	s.need = needMemory
	lk := &sh.lk
	e.ctr.look(c, e, now, cost, lk)
	s.post = lk.post
	if r.Pool != nil { // elastic: over its own limit it borrows (judged from this view)
		s.setAbove(lk.ceiling-lk.remaining+cost, cost)
	}
	farRoom := int64(-1) // the far band's margin, for emitSoon; -1: not far
	switch b, room := c.bandOf(e, lk, now, cost); b {
	case bandOver:
		sh.stats.over++
		c.denyFromMemory(s, lk, now, cost)
	case bandNear:
		sh.stats.near++
		if r.NearLimit == config.NearSync {
			c.prepareCharge(s, now, cost)
			return
		}
		// near_limit: async spends this instance's slice (bands.go)
		c.judge(s, lk, now, cost, c.capped(e, now, cost, lk.remaining, lk.ceiling))
	case bandFirst:
		sh.stats.first++
		// every charge reserves it: its emission waits as a far key's may
		farRoom = lazyRoom
		c.judge(s, lk, now, cost, false)
	default:
		sh.stats.far++
		farRoom = room
		if e.Recheck {
			c.replan(sh, e, now, room)
		}
		c.judge(s, lk, now, cost, false)
	}
	if !s.allowed && r.Shadow {
		s.shadowed = true
	}
	c.emitSoon(sh, e, now, cost, farRoom)
}

// entryFor finds or creates s's entry, ready for a decision (requires the
// lock). A blocked counter's (limit 0, a deny control) carries refusals to
// the analytics (the top-denied keys must show a blocked client); an
// existing one keeps its rule and kind: lifting a control finds it.
func (c *Checker) entryFor(sh *shard, s *slot, req *ratelimit.Request, now int64, blocked bool) *entry {
	return c.ready(sh, s, sh.lookup(s.h, s.rule, s.entriesOf(req)), req, now, blocked)
}

// ready makes e, s's entry as the table held it (nil: none), ready for
// a decision (requires the lock), as entryFor says.
func (c *Checker) ready(sh *shard, s *slot, e *entry, req *ratelimit.Request, now int64, blocked bool) *entry {
	r := s.rule
	if e != nil && !blocked && e.rule != r && e.ctr.kind() != kindOf(r) {
		// a blocked counter's entry, or a reload changed the algorithm:
		// its state is of another kind, so it starts afresh from the store
		c.dropEntry(sh, e, now)
		e = nil
	}
	if e == nil {
		e = c.create(sh, s, req, now)
	}
	s.e, e.used, e.active = e, now, true
	if !blocked {
		e.rule = r
	}
	if e.life == lifeParked {
		c.wake(sh, e, now)
	}
	e.ctr.roll(c, sh, e, now)
	return e
}

// wake puts a parked entry back in the refresh heap, its view stale.
func (c *Checker) wake(sh *shard, e *entry, now int64) {
	e.life, e.stale = lifeHeld, true
	sh.parked.Staled()
	sh.schedule(e, now+int64(c.cfg.MinRefresh))
}

// judge decides s from memory (requires the lock); Envoy's semantics
// charges every call here, allowed or not.
func (c *Checker) judge(s *slot, lk *look, now, cost int64, capped bool) {
	e := s.e
	s.verdict = e.ctr.judge(c, e, lk, now, cost, capped)
	if s.rule.Algorithm == config.AlgEnvoy {
		s.charged = true
		c.count(s, now, cost, s.allowed)
		if s.allowed {
			above(&e.pend, s)
		}
	}
}

// denyFromMemory refuses a key known to be over its limit, with no store
// call (Envoy's semantics still counts it).
func (c *Checker) denyFromMemory(s *slot, lk *look, now, cost int64) {
	e := s.e
	s.allowed = false
	s.retryAfter = time.Duration(max(e.overUntil, e.roomUntil) - now)
	if b, ok := e.ctr.(*bucketCounter); ok {
		// a bucket's room is trusted for one token's time (roomUntil): no
		// wait; the wait is its view's, which the store's answers raised
		s.retryAfter = time.Duration(max(e.overUntil-now, 0))
		if d := b.Peek(s.rule, now, cost); !d.Allowed && d.RetryAfter > s.retryAfter {
			s.retryAfter = d.RetryAfter
		}
	}
	s.never = cost > s.rule.Capacity()
	s.remaining, s.resetAfter = e.ctr.state(c, e, now, 0)
	if s.rule.Algorithm == config.AlgEnvoy {
		s.charged = true
		c.count(s, now, cost, false)
		s.remaining = max(0, lk.remaining-cost)
	}
}

// decideLocal runs a `mode: local` rule on the in-process limiter: Envoy
// rules are charged now, algorithm rules peeked and charged at commit
// (requires the lock of s.e, which carries the decisions to analytics).
func (c *Checker) decideLocal(s *slot, now, cost int64) {
	s.need = needLocal
	var ld limiter.Decision
	var err error
	if s.rule.Algorithm == config.AlgEnvoy {
		ld, err = c.local.AllowAt(s.key, s.rule.Limiter, now, cost, "")
		s.charged = true
	} else {
		ld, err = c.local.PeekAt(s.key, s.rule.Limiter, now, cost)
	}
	if err != nil && !errors.Is(err, limiter.ErrCostExceedsLimit) {
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

// commit records the memory decisions once the request stands (requires
// the locks): a refused one charges algorithm rules nothing, and every
// decision not yet counted counts as answered. held: the locks were kept
// since the decisions (a bucket's state computed then is current).
func (c *Checker) commit(slots []slot, req *ratelimit.Request, denied, deferred, held bool, now int64) {
	if req.View != nil {
		return // a quota server's look at a counter: no decision of anyone's, and no hit
	}
	for i := range slots {
		s := &slots[i]
		cost := s.cost
		switch later := s.later; {
		case s.compact:
			c.commitCompact(s, req, denied, deferred, now)
		case later != laterNone:
			s.later = laterNone
			if later == laterRefused {
				c.countRefused(s, s.e, now, cost, deferred)
				break
			}
			// a sync decision refunded is refused (unless the counter
			// holds it: Envoy's semantics, or a failed refund)
			c.countAnalytics(s, now, cost, s.allowed && (!denied || s.charged), deferred)
		case s.need == needLocal:
			allowed := s.allowed // Envoy's semantics: charged as decided, whatever the request's fate
			if !s.charged {      // peeked: charged now that the request stands
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
				above(&e.pend, s)
				e.ctr.admit(e, now, cost, s.post, held)
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
	// a peek reported what would remain after a charge that never came
	// (a store answer describes the counter as it is)
	if denied && s.allowed && !s.charged && (s.need != needCharge || s.call == callSkipped) {
		rem += cost
		if s.need == needMemory {
			s.resetAfter = s.resetBefore
		}
	}
	st.Remaining = max(rem-over, 0)
	st.ResetAfter = max(s.resetAfter, 0)
	if st.ResetAfter == 0 { // the counter is fresh: say when it would reset
		st.ResetAfter = r.FreshReset(now)
	}
	st.Degraded = s.call == callFailed
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
		st.Elastic = s.borrows() && !denied // a refused request borrowed nothing
	default:
		st.OverSoft = overSoft(r, rem)
	}
	if !denied {
		st.Lease = s.lease // a refused request's lease went back with the refund
	}
}

// scratch is a large Check's working memory, pooled.
type scratch struct {
	buf     []byte
	slots   [config.MaxLimitsPerDescriptor * config.MaxDescriptors]slot // a descriptor's slot, and its pool's or its further limits'
	locks   [config.MaxLimitsPerDescriptor * config.MaxDescriptors]int
	matched [config.MaxDescriptors]*config.Rule
}

// need is how a descriptor is decided.
type need uint8

const (
	needNone   need = iota // no rule, unlimited: allowed, nothing to count
	needMemory             // decided from memory
	needCharge             // near its limit: an atomic store charge of the async counter
	needExact              // mode: sync: the store runs the algorithm whole (counters.SyncStore)
	needLocal              // mode: local: the in-process limiter
)

// role is a slot's part in its request.
type role uint8

const (
	roleRule    role = iota // a descriptor's rule
	roleDefer               // a descriptor's rule that defers its refusals (`on_exceed: defer`)
	roleRelease             // the drain's decision on a deferred request: its "not yet" refuses nobody's request
	rolePool                // an elastic rule's pool, decided after its borrowers
)

// storeCall is what became of a slot's store call.
type storeCall uint8

const (
	callMade    storeCall = iota // made (or none needed)
	callSkipped                  // not made: the request was already refused
	callFailed                   // failed: the failure policy decided (degraded)
)

// slot is one descriptor's work in a Check.
type slot struct {
	rule  *config.Rule
	key   string // aliases the pooled key buffer (mode: local)
	idx   int    // the descriptor's index in the request
	cost  int64  // the request's hits times the descriptors naming this counter
	dupOf int    // >= 0: another descriptor of the request names the same counter
	h     uint64
	sh    int
	e     *entry
	need  need
	role  role
	extra bool // a further limit of descriptor idx (config.Rule.Extra)
	quiet bool // a quota server's look (Request.View): no decision of anyone's, not in the analytics
	// compact: decided on a compact record, with no entry (compact.go)
	compact bool
	call    storeCall
	later   countLater // the analytics tally that waits for the request's answer

	verdict       // this descriptor's answer (remaining: against the ceiling, after this request)
	shadowed bool // refused by a shadow-mode rule: the request is not
	charged  bool // consumption already recorded (Envoy semantics, sync, local)

	// above is what an elastic borrower takes beyond its limit (its pool
	// pays it), poolSlot (>= 0) its pool's slot; entries a pool's counter's
	above    int64
	poolSlot int
	entries  []config.Entry

	w     *syncWork     // the store call, when one is made
	lease string        // the lease a concurrency rule's admission holds
	post  limiter.State // a bucket's state after the cost (look), stored by commit
}

// stored says the slot is decided by a store call.
func (s *slot) stored() bool { return s.need == needCharge || s.need == needExact }

// borrows says an elastic borrower goes over its own limit.
func (s *slot) borrows() bool { return s.above > 0 }
