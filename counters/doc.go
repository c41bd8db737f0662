// Package counters keeps the shared counters: the contract a checker
// needs of a counter store ([Store]: read, charge, refund, `mode: sync`
// decisions, resets and operator controls), and its two implementations,
// [Redis] for deployments and [MemStore] for `velvetrope dev` and the
// tests. The aggregator applies deltas to either. One conformance suite
// runs against both.
//
// # Key layout
//
// Every key of one counter carries the same hash tag, derived from the
// counter key, so a counter's keys live in one Redis Cluster slot and one
// script can touch them all. The complete layout, every field the scripts
// write, is in docs/design.md ("Shared counters in Redis"). A counter's
// identity is the counter key (domain, rule path, request values), not the
// limit: editing a limit keeps the count. A window expires one window
// after it ends (a sliding window still weighs it), plus slack; a bucket
// when it would be full again, plus slack; per-instance fields live in the
// same hash and expire with it.
//
// # At most once
//
// Kafka delivers at least once. Each delta carries (instance, sequence),
// sequences only grow per instance, and all deltas of one counter travel
// in one partition in order. The apply script, atomic per counter, skips a
// delta whose sequence is not above the highest recorded for its
// (instance, partition) and records the new one in the same script that
// adds it. So a delta is applied at most once whatever happens around it:
// an aggregator killed between the Redis apply and the offset commit, a
// rebalance that re-fetches with other batch boundaries, a producer retry
// or a spill replay — the copies all stop at the sequence check. Offsets
// are committed only after Redis has applied, so nothing is skipped either.
package counters
