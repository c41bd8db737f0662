package limiter

// GCRA is the generic cell rate algorithm: it keeps one theoretical arrival
// time (TAT) per key and admits a request if, after adding cost × T (the
// emission interval Rate.Period / Rate.Tokens), the TAT is no further ahead
// of now than Burst × T. It admits exactly what a token bucket of capacity
// Burst and the same rate admits, with one number of state; this is the form
// the Redis scripts use. The TAT is kept exactly: whole nanoseconds in
// State.v plus the remainder in units of 1/Rate.Tokens ns. The zero State is
// a full burst.
type GCRA struct {
	Burst int64
	Rate  Rate
}

// Validate implements [Algorithm].
func (g GCRA) Validate() error { return validateBucket("gcra", g.Burst, g.Rate, "Burst", false) }

// Max implements [Algorithm].
func (g GCRA) Max() int64 { return g.Burst }

// tat returns the TAT of s as seen at now: never before now.
func (g GCRA) tat(s *State, now int64) (ns, frac int64) {
	if !s.set || s.v < now {
		return now, 0
	}
	return s.v, s.frac
}

// ahead returns (tat − now)·Tokens + frac: how far the TAT is ahead of now,
// in units of 1/Tokens ns.
func (g GCRA) ahead(tat, frac, now int64) u128 {
	return mul(tat-now, g.Rate.Tokens).addSmall(frac)
}

// AllowAt implements [Algorithm].
func (g GCRA) AllowAt(s *State, now, cost int64) (d Decision, err error) {
	err = g.decide(s, now, cost, &d)
	return d, err
}

func (g GCRA) decide(s *State, now, cost int64, d *Decision) error {
	if err := checkCost(now, cost, g.Burst, d); err != nil {
		return err
	}
	tat, frac := g.tat(s, now)
	// new TAT = tat + cost·Period/Tokens, exactly.
	q, r, _ := mul(cost, int64(g.Rate.Period)).div(g.Rate.Tokens) // <= Burst·T <= maxSpan
	nt, nf := tat+q, frac+r
	if nf >= g.Rate.Tokens {
		nt, nf = nt+1, nf-g.Rate.Tokens
	}
	tol := mul(g.Burst, int64(g.Rate.Period)) // Burst·T in units of 1/Tokens ns
	if after := g.ahead(nt, nf, now); after.cmp(tol) <= 0 {
		d.Allowed = true
		s.set, s.v, s.frac = true, nt, nf
		tat, frac = nt, nf
	} else {
		w, _ := after.sub(tol).divCeil(g.Rate.Tokens)
		d.RetryAfter = dur(w)
	}
	if used := g.ahead(tat, frac, now); used.cmp(tol) < 0 {
		rem, _, _ := tol.sub(used).div(int64(g.Rate.Period))
		d.Remaining = rem
	}
	d.ResetAfter = dur(tat - now)
	if frac > 0 {
		d.ResetAfter++
	}
	return nil
}

func (g GCRA) settle(*State, int64) {}

// adopt re-expresses the tokens outstanding under prev (rounded up) at the
// new emission interval, clamped to the new burst.
func (g GCRA) adopt(s *State, prev Algorithm, now int64) {
	p, ok := prev.(GCRA)
	if !s.set || !ok || s.v < now {
		return
	}
	out, _ := p.ahead(s.v, s.frac, now).divCeil(int64(p.Rate.Period))
	if out > g.Burst {
		out = g.Burst
	}
	q, r, _ := mul(out, int64(g.Rate.Period)).div(g.Rate.Tokens)
	s.v, s.frac = now+q, r
}

func (g GCRA) idleAt(s *State) int64 {
	if !s.set {
		return 0
	}
	if s.frac > 0 {
		return s.v + 1
	}
	return s.v
}

func (g GCRA) restore(s *State, idleAt, now int64) {
	if idleAt <= now {
		return
	}
	if !s.set || s.v < idleAt {
		s.set, s.v, s.frac = true, idleAt, 0
	}
}

// TAT returns the theoretical arrival time of s in whole nanoseconds,
// rounded up (0 for a fresh state).
func (g GCRA) TAT(s *State) int64 {
	if !s.set {
		return 0
	}
	if s.frac > 0 {
		return s.v + 1
	}
	return s.v
}

// Raise moves the TAT of s to at least tat (never back), as when other
// holders of the same shared bucket are found to have consumed from it.
func (g GCRA) Raise(s *State, tat int64) {
	if !s.set || s.v < tat {
		s.set, s.v, s.frac = true, tat, 0
	}
}

// refund moves the TAT back by cost × T (exactly), never before now.
func (g GCRA) refund(s *State, now, cost int64) {
	if !s.set {
		return
	}
	q, r, _ := mul(cost, int64(g.Rate.Period)).div(g.Rate.Tokens)
	nt, nf := s.v-q, s.frac-r
	if nf < 0 {
		nt, nf = nt-1, nf+g.Rate.Tokens
	}
	if nt < now {
		nt, nf = now, 0
	}
	s.v, s.frac = nt, nf
}
