package config

import "go.yaml.in/yaml/v3"

// Bounds on what one rule file may make the parser do. A rule file is
// input: one that reaches a process (a directory it watches, the validate
// endpoint, the CLI) must not be able to exhaust its stack, memory or time.
const (
	// MaxRuleFileBytes is the largest rule file read. Real rule sets are
	// kilobytes; 4 MiB leaves room for generated files with many values.
	MaxRuleFileBytes = 4 << 20
	// MaxYAMLDepth is the deepest nesting of mappings and lists, counted
	// after aliases are expanded. Each level of nested descriptors takes
	// two (a list of mappings), so rule trees up to 30 levels deep fit.
	MaxYAMLDepth = 64
	// MaxYAMLNodes is the most YAML nodes a file may expand to, aliases
	// counted at every use: it stops "billion laughs" files, where a few
	// lines of anchors repeated inside each other expand exponentially.
	MaxYAMLNodes = 200_000
)

// yamlGuard walks a parsed document the way the parser will, following
// aliases, and refuses cycles, excessive depth and excessive expansion
// before anything recursive runs on the tree.
type yamlGuard struct {
	p     *parser
	nodes int
	path  []*yaml.Node // the nodes being expanded, outermost first
}

// check reports whether doc is safe to parse; otherwise the reason is
// recorded in p with the position of the node that broke the bound.
func (g *yamlGuard) check(doc *yaml.Node) bool { return g.walk(doc, nil) }

func (g *yamlGuard) walk(n, via *yaml.Node) bool {
	if n == nil {
		return true
	}
	if g.nodes++; g.nodes > MaxYAMLNodes {
		g.p.errorf(g.where(n, via), "rule file expands to more than %d YAML nodes (anchors repeated inside each other?)", MaxYAMLNodes)
		return false
	}
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if target == nil {
			g.p.errorf(n, "alias *%s: unknown anchor", n.Value)
			return false
		}
		for _, anc := range g.path {
			if anc == target {
				g.p.errorf(n, "alias *%s refers to a node that contains it (anchor &%s at line %d): a cycle", n.Value, target.Anchor, target.Line)
				return false
			}
		}
		// the alias's own position is the one worth reporting for what the
		// expansion leads to
		if via == nil {
			via = n
		}
		return g.walk(target, via)
	}
	if len(n.Content) == 0 {
		return true
	}
	if len(g.path) >= MaxYAMLDepth {
		g.p.errorf(g.where(n, via), "rule file nested deeper than %d levels", MaxYAMLDepth)
		return false
	}
	g.path = append(g.path, n)
	defer func() { g.path = g.path[:len(g.path)-1] }()
	for _, c := range n.Content {
		if !g.walk(c, via) {
			return false
		}
	}
	return true
}

// where names the node a bound broke at: the alias that led there, if
// any, since the anchored text may be far from the cause.
func (g *yamlGuard) where(n, via *yaml.Node) *yaml.Node {
	if via != nil {
		return via
	}
	return n
}
