// Package rulestore keeps the rules database: every domain's rules
// document (the rule file format, YAML or JSON) with a version that only
// grows, written compare-and-set on that version (If-Match), with its
// history up to a bound (who wrote each version, when and why).
//
// Two backends share one Store: Redis (standalone or Cluster; the layout
// is in docs/design.md beside the counters') and memory (`dev`, tests).
// A follower — a checker's rules retriever — polls Heads and reads the
// domains whose version moved; Changes tells it of a write as it happens,
// best effort, so a change usually arrives in milliseconds and never later
// than the next poll.
//
// The store keeps documents; it does not parse them. Whoever writes
// validates first (the admin API compiles a document before it calls Put),
// so a document a checker cannot load never becomes a version.
package rulestore
