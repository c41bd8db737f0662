package limiter

// bucket is the exact refill arithmetic shared by TokenBucket and
// LeakyBucket: an integer balance that grows by rate up to capacity, with
// the fraction of a token carried in s.frac.

// fill returns the balance, carry and time of s brought up to now, without
// writing s. A fresh state is full. A clock behind s.at adds nothing and
// keeps s.at (state never moves backwards).
func fill(s *State, capacity int64, r Rate, now int64) (bal, carry, at int64) {
	if !s.set {
		return capacity, 0, now
	}
	bal, carry, at = s.v, s.frac, s.at
	if bal > capacity { // parameters shrank without adopt; never exceed capacity
		bal, carry = capacity, 0
	}
	if now <= at {
		return bal, carry, at
	}
	// Far from the limit the bucket usually refills to the top: test that
	// with one multiplication and skip the division.
	if r.Tokens > 0 && mul(now-at, r.Tokens).addSmall(carry).cmp(mul(capacity-bal, int64(r.Period))) >= 0 {
		return capacity, 0, now
	}
	g, rest := r.gain(now-at, carry, capacity-bal)
	bal += g
	if bal >= capacity {
		bal, rest = capacity, 0
	}
	return bal, rest, now
}

// bucketAllow is the shared decision: take cost from the balance if it is
// there; otherwise leave s untouched and say when it will be.
func bucketAllow(s *State, capacity int64, r Rate, now, cost int64, d *Decision) {
	bal, carry, at := fill(s, capacity, r, now)
	d.Limit = capacity
	if cost <= bal {
		bal -= cost
		s.set, s.v, s.frac, s.at = true, bal, carry, at
		d.Allowed = true
	} else if w, ok := r.wait(cost-bal, carry); ok {
		d.RetryAfter = dur(w + (at - now)) // at > now only after a clock rollback
	} else {
		d.RetryAfter = Never
	}
	d.Remaining = max(bal, 0) // in debt after a forced charge: nothing remains
	if bal >= capacity {      // full: fresh now, also on a clock behind the state's
		d.ResetAfter = 0
	} else if w, ok := r.wait(capacity-bal, carry); ok {
		d.ResetAfter = dur(w + (at - now))
	} else {
		d.ResetAfter = Never
	}
}

// bucketIdleAt is when the balance is full again.
func bucketIdleAt(s *State, capacity int64, r Rate) int64 {
	if !s.set || s.v >= capacity {
		return 0
	}
	w, ok := r.wait(capacity-s.v, s.frac)
	if !ok {
		return s.at + maxSpan
	}
	return s.at + w
}

// bucketRestore sets the balance a bucket has at now if it is full at idleAt,
// rounding the missing tokens up (never generous).
func bucketRestore(s *State, capacity int64, r Rate, idleAt, now int64) {
	if idleAt <= now {
		return
	}
	missing := capacity
	if r.Tokens > 0 {
		if q, rem := r.gain(idleAt-now, 0, capacity); q < capacity {
			missing = q
			if rem > 0 {
				missing++
			}
		}
	}
	bal, _, _ := fill(s, capacity, r, now)
	if capacity-missing < bal {
		bal = capacity - missing
	}
	s.set, s.v, s.frac, s.at = true, bal, 0, now
}

// bucketAdopt clamps a settled balance to a new capacity and rescales the
// carried fraction to the new rate.
func bucketAdopt(s *State, capacity int64, from, to Rate) {
	if !s.set {
		return
	}
	s.frac = from.rescale(s.frac, to)
	if s.v >= capacity {
		s.v, s.frac = capacity, 0
	}
}

func validateBucket(name string, capacity int64, r Rate, capField string, allowZeroRate bool) error {
	if capacity <= 0 {
		return &ParamError{Algorithm: name, Field: capField, Reason: "must be > 0"}
	}
	if r.Period <= 0 {
		return &ParamError{Algorithm: name, Field: "Rate.Period", Reason: "must be > 0"}
	}
	if !r.valid(allowZeroRate) {
		return &ParamError{Algorithm: name, Field: "Rate.Tokens", Reason: "must be > 0"}
	}
	if _, ok := r.span(capacity); r.Tokens > 0 && !ok {
		return &ParamError{Algorithm: name, Field: "Rate", Reason: "refills the capacity more slowly than once in 100 years"}
	}
	return nil
}

// TokenBucket holds up to Capacity tokens, gains Refill, and admits a
// request if its cost is available. Refill.Tokens == 0 makes a fixed quota
// that never refills (a refusal then retries [Never]). The zero State is a
// full bucket. Safe for concurrent use as a value; the State is not.
type TokenBucket struct {
	Capacity int64
	Refill   Rate
}

// Validate implements [Algorithm].
func (b TokenBucket) Validate() error {
	return validateBucket("token_bucket", b.Capacity, b.Refill, "Capacity", true)
}

// Max implements [Algorithm].
func (b TokenBucket) Max() int64 { return b.Capacity }

// AllowAt implements [Algorithm].
func (b TokenBucket) AllowAt(s *State, now, cost int64) (d Decision, err error) {
	err = b.decide(s, now, cost, &d)
	return d, err
}

func (b TokenBucket) decide(s *State, now, cost int64, d *Decision) error {
	if err := checkCost(now, cost, b.Capacity, d); err != nil {
		return err
	}
	bucketAllow(s, b.Capacity, b.Refill, now, cost, d)
	return nil
}

// Tokens returns the balance of s at now without changing s.
func (b TokenBucket) Tokens(s *State, now int64) int64 {
	bal, _, _ := fill(s, b.Capacity, b.Refill, now)
	return bal
}

func (b TokenBucket) settle(s *State, now int64) {
	if s.set {
		s.v, s.frac, s.at = fill(s, b.Capacity, b.Refill, now)
	}
}

func (b TokenBucket) adopt(s *State, prev Algorithm, _ int64) {
	from := b.Refill
	if p, ok := prev.(TokenBucket); ok {
		from = p.Refill
	}
	bucketAdopt(s, b.Capacity, from, b.Refill)
}

func (b TokenBucket) idleAt(s *State) int64 { return bucketIdleAt(s, b.Capacity, b.Refill) }

func (b TokenBucket) restore(s *State, idleAt, now int64) {
	bucketRestore(s, b.Capacity, b.Refill, idleAt, now)
}

// LeakyBucket is the leaky bucket as a meter: each admitted request pours
// its cost into a bucket of Capacity that drains at Leak; a request that
// would overflow is refused. It admits exactly what a [TokenBucket] with the
// same capacity and rate admits (the level is capacity − tokens); Remaining
// is the free room. The zero State is an empty bucket.
type LeakyBucket struct {
	Capacity int64
	Leak     Rate
}

// Validate implements [Algorithm].
func (b LeakyBucket) Validate() error {
	return validateBucket("leaky_bucket", b.Capacity, b.Leak, "Capacity", false)
}

// Max implements [Algorithm].
func (b LeakyBucket) Max() int64 { return b.Capacity }

// AllowAt implements [Algorithm].
func (b LeakyBucket) AllowAt(s *State, now, cost int64) (d Decision, err error) {
	err = b.decide(s, now, cost, &d)
	return d, err
}

func (b LeakyBucket) decide(s *State, now, cost int64, d *Decision) error {
	if err := checkCost(now, cost, b.Capacity, d); err != nil {
		return err
	}
	// The shared core keeps free room; the level is Capacity − room.
	bucketAllow(s, b.Capacity, b.Leak, now, cost, d)
	return nil
}

// Level returns how full the bucket of s is at now, without changing s.
func (b LeakyBucket) Level(s *State, now int64) int64 {
	room, _, _ := fill(s, b.Capacity, b.Leak, now)
	return b.Capacity - room
}

func (b LeakyBucket) settle(s *State, now int64) {
	if s.set {
		s.v, s.frac, s.at = fill(s, b.Capacity, b.Leak, now)
	}
}

func (b LeakyBucket) adopt(s *State, prev Algorithm, _ int64) {
	from := b.Leak
	if p, ok := prev.(LeakyBucket); ok {
		from = p.Leak
	}
	bucketAdopt(s, b.Capacity, from, b.Leak)
}

func (b LeakyBucket) idleAt(s *State) int64 { return bucketIdleAt(s, b.Capacity, b.Leak) }

func (b LeakyBucket) restore(s *State, idleAt, now int64) {
	bucketRestore(s, b.Capacity, b.Leak, idleAt, now)
}

// bucketRefund puts cost back, up to the capacity.
func bucketRefund(s *State, capacity int64, r Rate, now, cost int64) {
	if !s.set {
		return
	}
	bal, carry, at := fill(s, capacity, r, now)
	bal = min(capacity, bal+cost)
	if bal == capacity {
		carry = 0
	}
	s.v, s.frac, s.at = bal, carry, at
}

func (b TokenBucket) refund(s *State, now, cost int64) {
	bucketRefund(s, b.Capacity, b.Refill, now, cost)
}
func (b LeakyBucket) refund(s *State, now, cost int64) {
	bucketRefund(s, b.Capacity, b.Leak, now, cost)
}
