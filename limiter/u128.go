package limiter

import "math/bits"

// u128 is an unsigned 128-bit integer, enough for the products of
// nanoseconds, token counts and periods that the exact algorithms compare
// (each factor is a non-negative int64).
type u128 struct{ hi, lo uint64 }

func mul(a, b int64) u128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	return u128{x.hi + y.hi + c, lo}
}

func (x u128) addSmall(n int64) u128 { return x.add(u128{0, uint64(n)}) }

// sub returns x − y; callers ensure x >= y.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	return u128{x.hi - y.hi - b, lo}
}

func (x u128) cmp(y u128) int {
	switch {
	case x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo):
		return -1
	case x == y:
		return 0
	}
	return 1
}

// div returns x / d and the remainder; ok is false when the quotient does
// not fit in an int64.
func (x u128) div(d int64) (q, rem int64, ok bool) {
	if x.hi >= uint64(d) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(x.hi, x.lo, uint64(d))
	if uq > 1<<63-1 {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}

// divCeil returns ceil(x / d); ok as for div.
func (x u128) divCeil(d int64) (int64, bool) {
	q, rem, ok := x.div(d)
	if !ok {
		return 0, false
	}
	if rem > 0 {
		if q == 1<<63-1 {
			return 0, false
		}
		q++
	}
	return q, true
}
