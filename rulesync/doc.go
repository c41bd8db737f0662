// Package rulesync keeps a checker's live rules on their sources: rule
// files (config.Watcher) and the rules store (rulestore). Sources compiles
// the two together and swaps the result in; Follower is the rules
// retriever of the design, following the store's changes with a poll as
// the fallback and a cache file for a restart while the store is down.
package rulesync
