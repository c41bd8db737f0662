// Package checker decides whether a request is within its limits.
//
// A [ratelimit.Request] names a domain, one or more descriptors (each an
// ordered list of key=value entries) and a cost (hits). Each descriptor is
// matched against the live rules independently; the request is refused if
// any matched, non-shadow rule refuses it. The [ratelimit.Decision] carries
// one [ratelimit.Status] per descriptor. Descriptors of one request that name the same counter are
// decided together: their hits add up.
//
// Charging follows two rules (docs/rules.md):
//   - a rule without `algorithm` behaves exactly as Envoy's ratelimit
//     service: every call charges every matched descriptor, also when the
//     request is refused, so a client hammering a limit stays over it;
//   - a rule with an explicit `algorithm` charges nothing for a refused
//     request: its counters are decided first and charged only when the
//     whole request is admitted (a store charge made before another
//     descriptor refused is refunded).
//
// # Engines
//
// [Checker] is the async checker: counters live in a sharded in-memory
// table and in a shared [counters.Store] (Redis in production, [counters.MemStore] in
// `velvetrope dev` and tests); consumption leaves as deltas through an
// events.Producer. `mode: local` rules run on an exact in-process limiter,
// `mode: sync` rules charge the store on every decision. Package local
// holds the exact single-process engine over the same requests and
// decisions (package ratelimit, which both import and this package's
// callers share), the reference this one is property-tested against; both
// remember request ids through [ratelimit.RequestIDs].
//
// # The async estimate
//
// Per counter (and window) the checker keeps what it counted itself
// (exact) and the store's last answer: the global applied total and the
// part of it that is this instance's. Its estimate of global usage is
//
//	own counted + (applied total − own applied) + predicted in flight
//
// where the prediction is the other instances' rate (learned from
// successive store answers) times the pipeline lag. For bucket algorithms
// (token bucket, GCRA, the leaky-bucket meter, all kept as a theoretical
// arrival time) the same holds in TAT form: this instance's exact TAT,
// raised to the store's TAT plus this instance's unapplied hits. The
// reported remaining never includes the prediction.
//
// # Bands
//
// With remaining the ceiling minus the estimate, and
//
//	threshold = max(near_floor, limit × near_floor_percent / 100,
//	                rate × (min_refresh + pipeline_lag) × safety_percent / 100)
//
// (rate: this key's global hits per second, own and others'):
//
//   - far (remaining − cost ≥ threshold): decided from memory; no network
//     call, no allocation, no global lock: only the locks of the key
//     table's shards its keys hash to (Config.Shards, a mutex each, shared
//     by every key of that shard; taken in shard order when the
//     descriptors' keys lie in several);
//   - near (remaining − cost < threshold, or a key younger than
//     min_refresh + pipeline_lag, or fewer than two store answers so far):
//     with `near_limit: sync` (default)
//     one atomic store charge per decision, which counts this instance's
//     unapplied consumption and folds it into the counter; with
//     `near_limit: async` decided from memory;
//   - over (a store answer said there is no room, and memory agrees):
//     refused from memory until the window rolls or a refresh shows room.
//
// Guarantee. With one instance, decisions are exact: the same as the
// exact engine of package local (property-tested). With several instances and `near_limit: sync`, every
// admission that could exhaust the budget is an atomic charge, and the
// band is entered while the other instances' consumption still in flight
// is smaller than the threshold: admissions do not exceed the limit as
// long as the fleet's rate does not jump by more than the safety factor
// within one refresh interval plus one pipeline lag. The rate in the
// threshold is the learned one or, when higher, this instance's live rate
// with every other instance assumed as fast, so a key that speeds up
// widens its band at once. A hot key spread over shards charges one
// shared counter near its limit, so it is exact too. With `near_limit:
// async` no decision calls out: near the limit each instance spends only
// its quota slice of what remained (the ceiling over the live checkers
// before its first read of a window; re-cut from a store answer at most
// once per pipeline lag), which bounds the overshoot by one round of
// slices. The prediction of in-flight hits chooses the band but never
// refuses a request, so no rule refuses below its limit on a guess.
//
// # The fleet and its clock
//
// Every checker heartbeats to a registry in the counter store: the live
// count divides the slices and local_budget, and the store's clock keeps
// this checker's within MaxClockSkew of it, so no window opens early.
//
// # Refresh, memory, emission
//
// A background refresher re-reads a key when it could reach its near band
// before the next read at its observed rate (at most max_refresh apart, at
// least min_refresh): the cost grows with the keys approaching their
// limits. The key table is bounded (max_keys; least recently used of a
// sample is evicted, idle keys after idle_after); a key evicted while over
// its limit is remembered in a fixed-size tombstone table and comes back
// over; a key nobody decides on is parked (no reads) until a decision
// wakes it, near. Consumption is aggregated per key and emitted by a
// flusher every flush interval (or earlier when many keys are dirty); a key
// far from its limit holds it up to MaxEmitInterval while what it holds
// stays within half its far band's margin, split over the instances.
// Store charges of concurrent decisions go out in shared batches. While the producer
// refuses, deltas are kept in order and consumption keeps aggregating in
// the table: nothing counted is dropped.
package checker
