// Package sink keeps per-minute usage for analytics and answers the
// analytics queries (docs/analytics.md): top denied keys, usage of one
// key per minute, deny rate per rule, and the allow/deny/defer timeline of
// the dashboard.
//
// # Rows and exactly-once
//
// Every delta carries its stream's cumulative usage of one minute
// (eventsv1.MinuteUsage): a stream is one checker instance's tracking of one
// counter key, so (minute, domain, rule, descriptor, instance, stream)
// names a row, and the delta's sequence is that row's version. Whatever
// happens around a delta, the row written from it is complete up to it:
//
//   - a producer retry or a spill replay delivers a copy: the same row,
//     same version;
//   - an aggregator killed before its offsets were committed, or a
//     re-delivery cut into other batches, writes rows it already wrote, or
//     older versions of them;
//   - two aggregators briefly owning one partition write versions of the
//     same rows, each complete up to its version.
//
// The table is a ReplacingMergeTree(version) read with FINAL, which keeps
// the highest version of each row, so each delta counts once, in the row
// of its minute. Rows that lost their last write (an aggregator killed
// between applying a batch and writing its rows) are completed by the
// stream's next delta in the same minute.
//
// # Buffer
//
// [Writer] sits between the aggregator and the store: Add never blocks
// the Redis counting path; it keeps the newest version of each row, so the
// buffer grows with rows (keys × minutes), not with traffic. A flush loop
// writes every FlushInterval, retries with backoff while the store is down,
// and past MaxRows drops the rows of the oldest minutes, counted and logged
// (counters in Redis stay exact).
//
// # Stores
//
// [ClickHouse] writes over the native protocol (clickhouse-go/v2) and
// creates its database and tables on start (versioned, idempotent
// migrations); the schema and every statement run on current ClickHouse
// and on the 18.16 server the tests use (explicit column lists, positional
// parameters, TTL only where the server takes it). [Memory] is the
// in-process store of `velvetrope dev`, with the same queries.
package sink
