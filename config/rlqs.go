package config

// RLQS buckets (docs/envoy.md, "Rate limit quota service"): Envoy's
// rate_limit_quota filter names a bucket by a map of keys and values. A
// top-level descriptor with `rlqs: {bucket_keys: [k1, k2, ...]}` says how
// such a bucket becomes a descriptor: a bucket whose keys are exactly
// those is the entries k1=…, k2=…, in that order (k1 the descriptor's own
// key), matched against the domain's rules as a request's descriptor is.

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RLQSSpec is a top-level descriptor's rlqs block.
type RLQSSpec struct {
	BucketKeys []string
}

// rlqsMapping is a compiled rlqs block: its keys in entry order, and
// sorted (a bucket's map has no order).
type rlqsMapping struct {
	keys, sorted []string
}

// rlqsSpec reads a descriptor's rlqs block.
func (p *parser) rlqsSpec(n *yaml.Node) *RLQSSpec {
	spec := &RLQSSpec{}
	p.fields(n, "rlqs", []string{"bucket_keys"}, func(_ string, _, v *yaml.Node) {
		if v.Kind != yaml.SequenceNode {
			p.errorf(v, "rlqs.bucket_keys: want a list of keys, got %s", p.kindName(v))
			return
		}
		for _, item := range v.Content {
			k := p.str(item, "rlqs.bucket_keys")
			switch {
			case k == "":
				p.errorf(item, "rlqs.bucket_keys: a key must not be empty")
			case slices.Contains(spec.BucketKeys, k):
				p.errorf(item, "rlqs.bucket_keys: %q twice", k)
			default:
				spec.BucketKeys = append(spec.BucketKeys, k)
			}
		}
	})
	if n.Kind == yaml.MappingNode && len(spec.BucketKeys) == 0 {
		p.errorf(n, "rlqs: want bucket_keys, at least one key")
	}
	return spec
}

// checkRLQS reports an rlqs block that cannot map buckets: not on a
// top-level descriptor, keys not starting with its own, too many keys, or
// a concurrency rule beneath (a quota report carries no leases).
func checkRLQS(f *File, errs *ErrorList) {
	var walk func(ds []*Descriptor, top bool)
	walk = func(ds []*Descriptor, top bool) {
		for _, d := range ds {
			if s := d.RLQS; s != nil {
				switch {
				case !top:
					*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: rlqs belongs on a top-level descriptor (a bucket's first key)", d.Key)))
				case len(s.BucketKeys) > 0 && s.BucketKeys[0] != d.Key:
					*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: rlqs.bucket_keys must start with the descriptor's own key %q, got %q",
						d.Key, d.Key, s.BucketKeys[0])))
				case len(s.BucketKeys) > DefaultLimits().MaxEntries:
					*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: rlqs.bucket_keys: at most %d keys (a descriptor's entries)",
						d.Key, DefaultLimits().MaxEntries)))
				case d.Value != "":
					*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: rlqs needs a key-only descriptor (the bucket gives the value)", d.Key)))
				}
				if missing := unreachable(d, s.BucketKeys); missing != "" {
					*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: rlqs.bucket_keys: no descriptor %q under it: such buckets could never match a rule", d.Key, missing)))
				}
				if hasConcurrency([]*Descriptor{d}) {
					*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: a concurrency rule cannot serve RLQS buckets (a quota report carries no leases)", d.Key)))
				}
			}
			walk(d.Descriptors, false)
		}
	}
	walk(f.Descriptors, true)
	seen := map[string]string{}
	for _, d := range f.Descriptors {
		if d.RLQS == nil || len(d.RLQS.BucketKeys) == 0 {
			continue
		}
		sorted := slices.Clone(d.RLQS.BucketKeys)
		slices.Sort(sorted)
		set := strings.Join(sorted, "\x00")
		if prev, dup := seen[set]; dup {
			*errs = append(*errs, posError(d.Pos, fmt.Sprintf("descriptor %q: rlqs.bucket_keys are the keys of descriptor %q's rlqs too: a bucket must map to one", d.Key, prev)))
		}
		seen[set] = d.Key
	}
}

// unreachable is the first bucket key after d's own that the tree under d
// has no descriptor of, in order ("" when every one is there).
func unreachable(d *Descriptor, keys []string) string {
	level := []*Descriptor{d}
	for _, k := range keys[1:] {
		var next []*Descriptor
		for _, n := range level {
			for _, c := range n.Descriptors {
				if c.Key == k {
					next = append(next, c)
				}
			}
		}
		if len(next) == 0 {
			return k
		}
		level = next
	}
	return ""
}

func hasConcurrency(ds []*Descriptor) bool {
	for _, d := range ds {
		if d.Concurrency != nil || hasConcurrency(d.Descriptors) {
			return true
		}
	}
	return false
}

// rlqsMappings are a file's compiled rlqs blocks.
func rlqsMappings(f *File) []rlqsMapping {
	var out []rlqsMapping
	for _, d := range f.Descriptors {
		if d.RLQS != nil && len(d.RLQS.BucketKeys) > 0 {
			sorted := slices.Clone(d.RLQS.BucketKeys)
			slices.Sort(sorted)
			out = append(out, rlqsMapping{keys: d.RLQS.BucketKeys, sorted: sorted})
		}
	}
	return out
}

// ErrNoBucketMapping is a bucket no rlqs block of its domain maps.
var ErrNoBucketMapping = fmt.Errorf("no rlqs block maps these bucket keys")

// BucketEntries returns the entries RLQS bucket b (key → value) of domain
// stands for: the keys of the domain's rlqs block whose bucket_keys are
// exactly b's, in that block's order. ErrNoBucketMapping wrapped, naming
// the keys, when none is.
func (rs *RuleSet) BucketEntries(domain string, b map[string]string) ([]Entry, error) {
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, m := range rs.rlqs[domain] {
		if slices.Equal(m.sorted, keys) {
			es := make([]Entry, len(m.keys))
			for i, k := range m.keys {
				es[i] = Entry{Key: k, Value: b[k]}
			}
			return es, nil
		}
	}
	return nil, fmt.Errorf("%w: domain %q, keys [%s]", ErrNoBucketMapping, domain, strings.Join(keys, ", "))
}
