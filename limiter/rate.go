package limiter

import (
	"math/bits"
	"time"
)

// maxSpan bounds how far into the future any state may point (100 years).
// Parameters whose full refill takes longer are rejected by Validate, which
// is what keeps now + span inside int64 nanoseconds.
const maxSpan = int64(100 * 365 * 24 * time.Hour)

// Rate is Tokens per Period, kept as two integers so that rates such as
// 3 per second or 100 per minute are exact: no float, no rounded
// nanoseconds-per-token.
type Rate struct {
	Tokens int64         // tokens gained per Period; >= 0
	Period time.Duration // > 0
}

// PerSecond returns a Rate of n tokens per second.
func PerSecond(n int64) Rate { return Rate{Tokens: n, Period: time.Second} }

// PerMinute returns a Rate of n tokens per minute.
func PerMinute(n int64) Rate { return Rate{Tokens: n, Period: time.Minute} }

// PerHour returns a Rate of n tokens per hour.
func PerHour(n int64) Rate { return Rate{Tokens: n, Period: time.Hour} }

// gain returns the whole tokens that elapsed nanoseconds add to a carried
// remainder (carry/Period of a token, 0 <= carry < Period), capped at limit.
// At the cap the fraction is dropped: a full bucket accumulates nothing.
func (r Rate) gain(elapsed, carry, limit int64) (tokens, rest int64) {
	if r.Tokens == 0 || elapsed <= 0 {
		return 0, carry
	}
	hi, lo := bits.Mul64(uint64(elapsed), uint64(r.Tokens))
	var c uint64
	lo, c = bits.Add64(lo, uint64(carry), 0)
	hi += c
	p := uint64(r.Period)
	if hi >= p { // quotient needs more than 64 bits: certainly past the cap
		return limit, 0
	}
	q, rem := bits.Div64(hi, lo, p)
	if q >= uint64(limit) {
		return limit, 0
	}
	return int64(q), int64(rem)
}

// wait returns the nanoseconds until need more tokens have been gained,
// given carry, rounded up; ok is false when they never will be (a zero rate)
// or the wait does not fit in maxSpan.
func (r Rate) wait(need, carry int64) (ns int64, ok bool) {
	if need <= 0 {
		return 0, true
	}
	if r.Tokens == 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(need), uint64(r.Period))
	var b uint64
	lo, b = bits.Sub64(lo, uint64(carry), 0)
	hi -= b
	// ceil((need·Period − carry) / Tokens)
	t := uint64(r.Tokens)
	lo, c := bits.Add64(lo, t-1, 0)
	hi += c
	if hi >= t {
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, t)
	if q > uint64(maxSpan) {
		return 0, false
	}
	return int64(q), true
}

// rescale converts a carry kept under r into the same fraction of a token
// under to, rounding down (never creating a token).
func (r Rate) rescale(carry int64, to Rate) int64 {
	if carry == 0 || to.Tokens == 0 || r.Period == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(carry), uint64(to.Period))
	q, _ := bits.Div64(hi, lo, uint64(r.Period)) // carry < r.Period, so hi < r.Period
	return int64(q)
}

// valid reports whether r can be used; allowZero admits Tokens == 0.
func (r Rate) valid(allowZero bool) bool {
	if r.Period <= 0 || r.Tokens < 0 {
		return false
	}
	return allowZero || r.Tokens > 0
}

// span returns ceil(n·Period/Tokens), the time n tokens take, and whether it
// fits in maxSpan.
func (r Rate) span(n int64) (int64, bool) { return r.wait(n, 0) }
