// Package cli holds the tests of what the velvetrope binary tells the
// people who run it: every subcommand's --help (its own flags, each one
// read, and its environment variables), the top-level usage (every
// variable the code reads, derived from the code itself), `velvetrope
// check` on an unknown domain and its rounded durations, dev's banner
// (an admin token that works, a grpcurl line that works as printed) and
// gRPC server reflection on and off. The tests run the binary itself,
// built once by TestMain; none needs an external service.
//
// Run them alone with `go test ./internal/cli`.
package cli
