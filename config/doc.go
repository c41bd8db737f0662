// Package config loads velvetrope's two kinds of configuration.
//
// Rules: the Envoy/Lyft ratelimit service YAML format, unchanged (domain,
// nested descriptors with key, value, rate_limit {unit, requests_per_unit,
// unlimited, name}, shadow_mode, replaces, detailed_metric), plus the
// velvetrope extensions (algorithm, burst, throttle, on_exceed, mode,
// near_limit, failure, shards, share_threshold). [LoadRules] reads files
// and directories into one [RuleSet]; every problem is reported with its
// file:line:column. A RuleSet is immutable and safe for concurrent use
// without locks; [Store] swaps a new one in with one atomic pointer store,
// and [Watcher] reloads on change, keeping the last good set when a new one
// is invalid.
//
// Application: [App] holds listeners, backends, rule paths and timings, from
// one YAML file plus VELVETROPE_* environment overrides and [Override]s
// (flags), with defaults that let every process start without a file.
// [LoadApp] reports every problem by its key path and where the value came
// from: the file's file:line:column, the variable, or the flag.
package config
