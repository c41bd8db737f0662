// Package checker decides whether a request is within its limits: the
// async engine of velvetrope.
//
// A [ratelimit.Request] names a domain, descriptors (ordered key=value
// entries) and a cost (hits). Each descriptor is matched against the live
// rules; the request is refused if any matched non-shadow rule refuses it,
// and the [ratelimit.Decision] carries one [ratelimit.Status] per
// descriptor (descriptors naming the same counter add their hits). A rule
// without `algorithm` charges as Envoy's ratelimit service does (every
// call); one with it charges nothing for a refused request.
//
// [Checker] keeps its counters in a sharded in-memory table and a shared
// [counters.Store] (Redis, or [counters.MemStore] in `velvetrope dev`);
// consumption leaves as deltas through an events.Producer. Far from a
// limit a decision touches only memory: no network call, no allocation,
// only the mutex of its key's table shard (shared by that shard's keys,
// taken in shard order). Near a limit (`near_limit: sync`, the default) it
// makes one atomic store charge; a key known to be over is refused from
// memory. `mode: local` rules run on an exact in-process limiter, `mode:
// sync` rules in the store. Package local is the exact single-process
// engine this one is property-tested against.
//
// docs/design.md ("How the checker decides" and after) explains the
// estimate, bands, clock, refresh, eviction and emission. In the code a
// decision goes through four phases (check.go: prepare, decide, settle,
// report); bandOf places it; the counter of its key, a window or a
// bucket, is the one place that knows the kind.
package checker
