// Package e2e holds the end-to-end tests of the shared-counter pipeline:
// several checkers, an aggregator, real Kafka and real Redis, all in one
// test process, each component with its own clients.
package e2e
