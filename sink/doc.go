// Package sink writes per-minute usage to ClickHouse and answers the
// analytics queries (top denied keys, usage per key, deny rate per rule)
// (DESIGN.md, "Analytics"). It is built by a later issue; today it holds
// only this description.
package sink
