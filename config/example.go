package config

import _ "embed"

//go:embed example/api.yaml
var exampleRules []byte

// ExampleRulesPath is how the built-in example rules are named in errors and
// listings.
const ExampleRulesPath = "config/example/api.yaml (built in)"

// ExampleRules returns the built-in example rule set of `velvetrope dev`:
// domain api with per-remote_address, per-user_id, per-tenant/route and
// login limits.
func ExampleRules() (*RuleSet, error) {
	f, err := ExampleRuleFile()
	if err != nil {
		return nil, err
	}
	return Compile([]*File{f})
}

// ExampleRuleFile returns the built-in example rule file, parsed.
func ExampleRuleFile() (*File, error) { return ParseRules(ExampleRulesPath, exampleRules) }
