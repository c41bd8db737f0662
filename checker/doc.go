// Package checker decides whether a request is within its limits: the
// async engine of velvetrope.
//
// A [ratelimit.Request] names a domain, one or more descriptors (each an
// ordered list of key=value entries) and a cost (hits). Each descriptor is
// matched against the live rules; the request is refused if any matched,
// non-shadow rule refuses it, and the [ratelimit.Decision] carries one
// [ratelimit.Status] per descriptor. Descriptors of one request that name
// the same counter are decided together: their hits add up. A rule without
// `algorithm` charges as Envoy's ratelimit service does (every call, also
// a refused one); a rule with one charges nothing for a refused request
// (a store charge made before another descriptor refused is refunded).
//
// [Checker] keeps its counters in a sharded in-memory table and in a
// shared [counters.Store] (Redis in production, [counters.MemStore] in
// `velvetrope dev` and tests); consumption leaves as deltas through an
// events.Producer. Far from a limit a decision touches only memory: no
// network call, no allocation, only the mutex of the table shard its key
// hashes to (shared by that shard's keys; taken in shard order when a
// request's keys lie in several). Near a limit (`near_limit: sync`, the
// default) it makes one atomic store charge; a key known to be over is
// refused from memory. `mode: local` rules run on an exact in-process
// limiter and `mode: sync` rules run their algorithm in the store on every
// decision. Package local is the exact single-process engine over the
// same requests and decisions, the reference this one is property-tested
// against.
//
// How the estimate, the bands and their guarantee, the fleet's clock,
// refresh, eviction and emission work is docs/design.md ("How the
// checker decides" and the sections after it). In the code, a decision
// goes through four phases (check.go: prepare, decide, settle, report);
// bandOf places it; the counter of its key — a window counter or a
// bucket — is the one place that knows the kind.
package checker
