// Package limiter holds velvetrope's exact, in-process rate limiting
// algorithms: token bucket, GCRA, leaky bucket (as a meter), fixed window,
// sliding window counter and sliding log.
//
// Every algorithm is a small comparable parameter struct (for example
// [TokenBucket]) whose AllowAt method takes a [State], the current time in
// integer nanoseconds and a cost in integer token units, and returns a
// [Decision]. There is no I/O, no goroutine and no timer: refill is computed
// lazily from the time that passed. Rates are kept as a ratio of two
// integers ([Rate]) and the fractional token left over by a refill is carried
// exactly, so a limiter running for years neither gains nor loses a token to
// rounding.
//
// The rules every algorithm keeps:
//   - a clock that goes backwards creates no tokens and never moves state
//     backwards (the earlier time is treated as "no time passed");
//   - long idle gaps cannot overflow: elapsed × rate is computed in 128 bits
//     and clamped to the capacity;
//   - a refused request leaves the state exactly as it was (except
//     [FixedWindow] with ChargeDenied, which reproduces Envoy's ratelimit
//     service where every call is counted);
//   - cost 0 is a probe that reports without consuming; a negative cost, a
//     cost above what the parameters can ever admit, and invalid parameters
//     are typed errors ([ErrNegativeCost], [CostError], [ParamError]);
//   - RetryAfter is rounded up to the next nanosecond, and is [Never] when
//     waiting cannot help.
//
// [Keyed] runs any algorithm for many keys: sharded locks (no global lock),
// a bounded number of keys with an eviction policy that cannot hand an
// evicted, exhausted key a free full bucket, parameter changes that settle
// under the old parameters first, and request-id idempotency.
//
// This package is what a rule with `mode: local` runs, and the reference the
// Redis scripts of later packages are tested against.
package limiter
