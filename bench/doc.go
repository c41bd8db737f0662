// Package bench holds velvetrope's whole-system benchmarks: service
// throughput under load, aggregator events per second and overshoot, side
// by side with alternatives in the same run. The per-package micro
// benchmarks (for example limiter's BenchmarkTokenBucketAllow against
// golang.org/x/time/rate) live next to the code they measure; `make bench`
// runs them all.
package bench
