// Package checker decides whether a request is within its limits.
//
// A [Request] names a domain, one or more descriptors (each an ordered list
// of key=value entries) and a cost (hits). Each descriptor is matched
// against the live rules independently; the request is refused if any
// matched, non-shadow rule refuses it. The [Decision] carries one [Status]
// per descriptor.
//
// Charging follows two rules (DESIGN.md, "Semantics of a denied request"):
//   - a rule without `algorithm` behaves exactly as Envoy's ratelimit
//     service: every call charges every matched descriptor, also when the
//     request is refused, so a client hammering a limit stays over it;
//   - a rule with an explicit `algorithm` charges nothing for a refused
//     request: its limiters are probed first and charged only when the whole
//     request is admitted.
//
// [Local] is the exact in-process engine (what `mode: local` runs and what
// `velvetrope dev` serves): it keeps every counter in a [limiter.Keyed].
package checker
