// Package events is velvetrope's event bus: the consumption deltas that
// checkers send to aggregators, and the raw records of the deferred queue
// (deferred requests and their dead letters) that checkers publish and
// drains consume.
//
// # Deltas
//
// The schema is events/v1/delta.proto (package eventsv1, generated code
// committed; `make proto` regenerates it). [Encode] and [AppendEncode]
// write a delta's wire form; [Decode] reads it back and [Validate] checks
// the invariants every delta keeps, rejecting a malformed or foreign
// record (or one above [MaxRecordBytes]) with a *[DecodeError], which
// matches [ErrBadRecord]; [SchemaHeader] names a Kafka record's schema.
// A v2 record packs many deltas ([AppendPacked], at most [MaxPackBytes]);
// [DecodeRecord] reads a record of either schema, telling them apart by
// content ([IsPacked]).
//
// A [Producer] sends deltas. One that can never be delivered is set aside
// — counted ([DropCounter]) and logged at a bounded rate — never returned
// as an error, so it cannot hold up the deltas behind it. [KafkaProducer]
// (github.com/segmentio/kafka-go; one v2 record per partition and call,
// murmur2 on the counter key, lz4-compressed (configurable), acks from
// all in-sync replicas) keeps a local [Spill] file: while Kafka is
// unreachable records go there, in order, and are replayed when it
// returns.
//
// # Raw records
//
// A [Publisher] appends records partitioned by key and returns once every
// one is acknowledged, with no spill file in between (a caller must hear
// of a lost deferred request at once): [KafkaWriter], records of at most
// [MaxPublishBytes]. A [Consumer] receives the records ([Message]) of one topic for
// one consumer group and commits them: [KafkaConsumer]. [Reader] turns a
// Consumer's records into deltas, a record's all at once, counting,
// logging and skipping the ones that do not decode.
//
// # Both
//
// [MemBus] (in memory, for `velvetrope dev` and the tests) is a Producer,
// a Publisher and a Consumer at once, encoding and decoding as Kafka does.
// [Security] (TLS and a [SASLMechanism]) is how every Kafka client of the
// package reaches the brokers; [EnsureTopic] creates a topic.
package events
