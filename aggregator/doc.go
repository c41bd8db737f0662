// Package aggregator applies the checkers' consumption deltas to the shared
// counters (docs/design.md, "Shared counters in Redis").
//
// [Embedded] is the in-process aggregator of `velvetrope dev`: it reads an
// events.Consumer (the in-memory bus) and applies each delta, at most once,
// to an [Applier] (counters.MemStore), committing after applying. The Kafka
// consumer-group aggregator over sharded Redis counters is built on the same
// contract.
package aggregator
