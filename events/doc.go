// Package events defines the versioned schema of consumption deltas that
// checkers emit to Kafka and the producer that batches them, with an
// in-memory bus of the same interface for embedded mode (DESIGN.md,
// "Events"). It is built by a later issue; today it holds only this
// description.
package events
