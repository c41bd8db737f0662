// Package events carries consumption deltas from checkers to aggregators.
//
// The schema is events/v1/delta.proto (package eventsv1, generated code
// committed; `make proto` regenerates it). A [Producer] sends deltas; a
// [Consumer] receives raw records and [Decode] turns them back into deltas,
// rejecting malformed ones with a *[DecodeError].
//
// Implementations: [KafkaProducer] (github.com/segmentio/kafka-go; keyed by
// counter key, lz4-compressed (configurable), acks from all in-sync replicas, with a local
// [Spill] file that holds deltas in order while Kafka is unreachable and
// replays them when it returns) and [MemBus] (in-memory, for `velvetrope
// dev` and unit tests), which is both a Producer and a Consumer.
package events
