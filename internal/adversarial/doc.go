// Package adversarial is the suite of attacks velvetrope was found to
// fail and now holds against: each test reproduces one finding of an
// attacker's or a careless operator's probe through a surface of a real
// process (HTTP, /json, gRPC, rule files, the admin API, the deferred
// queue) and asserts the fixed behaviour. The tests run the velvetrope
// binary itself (built once by TestMain), so a bound on memory is a bound
// on the resident set of that process, measured from /proc.
//
// Run it alone with `go test -run . ./internal/adversarial`; `make test`
// runs it with everything else. Tests that need Kafka or Redis skip when
// the services' variables are unset, as every integration test does.
package adversarial
