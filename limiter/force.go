package limiter

import (
	"hash/maphash"
	"math"
	"strings"
)

// A forced charge counts a cost that was already spent: a response's
// tokens or bytes, known only after the request was admitted. It is never
// refused, and it may take a key past its limit, so that the key's next
// requests are refused until the debt is paid back: a window's count goes
// above its limit, a bucket's balance below zero, a GCRA's TAT beyond its
// burst, and a sliding log holds more than its limit.

// Force counts cost against s at now whatever s holds, and fills d with
// what remains after it (0 when the cost went past the limit).
func Force(alg Algorithm, s *State, now, cost int64, d *Decision) error {
	if cost < 0 {
		return ErrNegativeCost
	}
	if err := alg.Validate(); err != nil {
		return err
	}
	alg.force(s, now, cost)
	// what the key reports now: a probe of nothing
	return decide(alg, s, now, 0, d)
}

// ForceAt counts cost against key at now under alg whatever the key holds
// (see [Force]); it is never refused. With a request id, a retry within the
// idempotency TTL gets the first answer and is not counted again.
func (k *Keyed) ForceAt(key string, alg Algorithm, now, cost int64, requestID string) (d Decision, err error) {
	if cost < 0 {
		return Decision{}, ErrNegativeCost
	}
	if err := alg.Validate(); err != nil {
		return Decision{RetryAfter: Never}, err
	}
	h := maphash.String(k.seed, key)
	sh := &k.shards[h&k.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if requestID != "" && k.ids != nil {
		if a, found, _ := k.ids.Get(key, requestID, 0, now); found {
			return a.d, a.err
		}
	}
	e := sh.keys[h]
	if e != nil && e.key != key {
		e = sh.spill[key]
	}
	switch {
	case e == nil:
		e = k.create(sh, key, h, alg, now)
	case e.alg != alg:
		change(e, alg, now)
	}
	err = Force(alg, &e.st, now, cost, &d)
	d.Allowed, d.RetryAfter = true, 0 // a charge is never refused
	if now > e.used {
		e.used = now
	}
	if requestID != "" && k.ids != nil {
		k.ids.Put(strings.Clone(key), strings.Clone(requestID), 0, now, answer{d, err})
	}
	return d, err
}

func (f FixedWindow) force(s *State, now, cost int64) {
	start, count := f.current(s, now)
	s.set, s.at, s.v = true, start, satAdd(count, cost)
}

func (w SlidingWindow) force(s *State, now, cost int64) {
	start, cur, prev := w.current(s, now)
	s.set, s.at, s.v, s.prev = true, start, satAdd(cur, cost), prev
}

func (l SlidingLog) force(s *State, now, cost int64) {
	if s.log == nil {
		s.log = &slog{}
	}
	if s.set && now < s.at {
		now = s.at
	}
	s.set, s.at = true, now
	s.log.expire(now, int64(l.Window))
	if cost > 0 {
		s.log.ts, s.log.cost = append(s.log.ts, now), append(s.log.cost, cost)
		s.log.sum = satAdd(s.log.sum, cost)
	}
}

// bucketForce takes cost from the balance, into debt if need be (the
// balance refills from below zero at the bucket's rate). The debt is
// bounded by maxDebt.
func bucketForce(s *State, capacity int64, r Rate, now, cost int64) {
	bal, carry, at := fill(s, capacity, r, now)
	bal -= max(0, min(cost, bal+maxDebt(capacity, r)))
	s.set, s.v, s.frac, s.at = true, bal, carry, at
}

// maxDebt bounds a bucket's debt at a hundred capacities, and at what it
// refills within maxSpan, so that its arithmetic stays in range and a
// refusal's wait is a time, never Never. Far more than any response costs.
func maxDebt(capacity int64, r Rate) int64 {
	span, ok := r.span(capacity)
	if !ok || span <= 0 {
		return 0 // a quota that never refills: a charge empties it
	}
	return capacity * max(0, min(100, maxSpan/span-1))
}

func (b TokenBucket) force(s *State, now, cost int64) {
	bucketForce(s, b.Capacity, b.Refill, now, cost)
}

func (b LeakyBucket) force(s *State, now, cost int64) {
	bucketForce(s, b.Capacity, b.Leak, now, cost)
}

// Force is [Force] of g without its answer, and without an interface value
// (the async checker's buckets: no allocation).
func (g GCRA) Force(s *State, now, cost int64) {
	if cost > 0 {
		g.force(s, now, cost)
	}
}

// force moves the TAT ahead by cost × T, past the burst if need be; it
// stays within a hundred bursts, and within maxSpan, of now.
func (g GCRA) force(s *State, now, cost int64) {
	tat, frac := g.tat(s, now)
	q, r, ok := mul(cost, int64(g.Rate.Period)).div(g.Rate.Tokens)
	if !ok || q > maxSpan {
		q, r = maxSpan, 0
	}
	nt, nf := tat+q, frac+r
	if nf >= g.Rate.Tokens {
		nt, nf = nt+1, nf-g.Rate.Tokens
	}
	limit := mul(min(g.Burst, math.MaxInt64/101)*101, int64(g.Rate.Period)) // in units of 1/Tokens ns
	if span := mul(maxSpan, g.Rate.Tokens); span.cmp(limit) < 0 {
		limit = span
	}
	if g.ahead(nt, nf, now).cmp(limit) > 0 {
		// the debt's bound: the TAT at now + limit
		w, _ := limit.divCeil(g.Rate.Tokens)
		nt, nf = now+w, 0
	}
	if nt > tat || nt == tat && nf > frac {
		s.set, s.v, s.frac = true, nt, nf
	}
}
