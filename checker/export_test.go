package checker

// AsyncRules is the rule set of the internal tests, for engines_test.go
// (an external test: it compares the checker with local.Engine, which
// imports checker).
const AsyncRules = asyncRules
