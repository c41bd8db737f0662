// Package aggregator consumes the checkers' consumption deltas from Kafka
// and applies them to the sharded Redis counters, each delta at most once,
// committing Kafka offsets only after Redis has applied them
// (DESIGN.md, "Aggregator and counters"). It is built by a later issue;
// today it holds only this description.
package aggregator
