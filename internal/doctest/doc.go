// Package doctest keeps the documentation's examples true: its tests read
// README.md and docs/*.md, validate every YAML block with the code that
// loads it (a rule file as `velvetrope rules validate` does, a
// configuration file as `--config` does), and run every curl example
// against a real `velvetrope dev`, checking each answer against the
// `# {...}` comment that documents it; docs/testing.md's table of fuzz
// targets is held to the code's and the Makefile's. A doc example that
// drifts from the product fails `go test ./...` naming FILE:LINE of the
// markdown.
//
// The markers a block may carry, and what each test does, are in
// docs/testing.md ("Docs that cannot drift").
package doctest
