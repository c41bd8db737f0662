// Package counters keeps what the checkers, aggregators and drains of one
// deployment share: the counter store, in two implementations with the
// same semantics — [Redis] for deployments (standalone, Sentinel or
// Cluster) and [MemStore] for `velvetrope dev` and the tests — held equal
// by one conformance suite. It holds:
//
//   - the shared counters, as the checker needs them ([Store]): batch
//     reads of applied state ([ReadItem]), atomic near-limit charges and
//     their refunds ([ChargeRequest]), batches of both in one round trip
//     ([Op]) — concurrent decisions' calls grouped into those batches
//     by a [Batcher] ([Call]) —, `mode: sync` decisions run inside the store on its clock
//     ([SyncStore], [SyncRequest]), and the registry of live checkers with
//     the store's time ([Registry], [Beat]);
//   - the aggregator's side: deltas applied at most once each
//     ([Redis.ApplyBatch], [MemStore.Apply], [ApplyAmount]);
//   - operator work: resets ([Resetter]) and the controls every checker
//     applies ([ControlStore], [Control], [ControlID]);
//   - the deferred queue's shared state: ticket states ([Tickets]),
//     request-id claims and the counts of queued items ([Deferrals]), in
//     tables the memory store bounds ([MaxMemEntries]);
//   - the arithmetic the stores and the checker agree on: a bucket's span
//     ([Span]) and a hot key's shard keys ([ShardKey]); the sliding
//     window's is limiter.SlidingCounts, which the memory store uses and
//     the Redis scripts mirror (a test holds them equal).
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
// (instance, partition) — a field of the counter's own hash, expiring
// with it — and records the new one in the same script that adds it. So a delta is applied at most once whatever happens around it:
// an aggregator killed between the Redis apply and the offset commit, a
// rebalance that re-fetches with other batch boundaries, a producer retry
// or a spill replay — the copies all stop at the sequence check. Offsets
// are committed only after Redis has applied, so nothing is skipped either.
package counters
