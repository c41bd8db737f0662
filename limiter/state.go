package limiter

// State is the per-key state of any algorithm. The zero value is a fresh
// key: a full bucket, an empty window. Each algorithm reads the fields it
// owns; a State must be used with one algorithm type at a time ([Keyed]
// enforces this). State is not safe for concurrent use: callers serialise
// access (Keyed holds a per-shard lock).
type State struct {
	set  bool  // false until the first decision
	v    int64 // tokens (token bucket), level (leaky), TAT (GCRA), count (windows)
	frac int64 // carried fraction of a token, or sub-nanosecond TAT part (GCRA)
	at   int64 // last refill time, or window start
	prev int64 // previous window count (sliding window counter)
	log  *slog // admitted hits (sliding log)
}

// Algorithm is implemented by the parameter structs of this package. The
// interface is sealed (it has unexported methods) because [Keyed] relies on
// every algorithm settling, adopting and restoring state exactly.
type Algorithm interface {
	// Validate reports invalid parameters as a [ParamError].
	Validate() error
	// Max is the largest cost a single request can ever be admitted with.
	Max() int64
	// AllowAt decides cost at now (unix nanoseconds) and updates s when
	// admitted.
	AllowAt(s *State, now, cost int64) (Decision, error)

	// decide is AllowAt writing into d, which callers zero.
	decide(s *State, now, cost int64, d *Decision) error
	// settle brings s up to now under these parameters (refill, window roll)
	// without charging anything; used before a parameter change.
	settle(s *State, now int64)
	// adopt converts s, settled under prev (the same algorithm type) at now,
	// to these parameters and clamps it.
	adopt(s *State, prev Algorithm, now int64)
	// idleAt is the time from which s is indistinguishable from a fresh
	// state; 0 if it already is.
	idleAt(s *State) int64
	// restore makes s at least as restrictive as a state that becomes fresh
	// at idleAt, as seen at now.
	restore(s *State, idleAt, now int64)
	// refund gives back cost charged at or before now (never above a fresh
	// state).
	refund(s *State, now, cost int64)
	// force counts cost at now whatever s holds, past the limit if need
	// be (force.go).
	force(s *State, now, cost int64)
}
