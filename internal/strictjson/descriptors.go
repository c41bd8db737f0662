package strictjson

import "github.com/velvetrope/velvetrope/config"

// DescriptorBounds are b as bounds of a JSON body's descriptors (the
// paths descriptors, descriptors.entries and their key and value), which
// /v1/check and Envoy's /json share: the decoder stops at the first
// descriptor, entry or byte past them, before anything is built.
func DescriptorBounds(b config.LimitsConfig) []Bound {
	b = b.WithDefaults()
	return []Bound{
		{Path: "descriptors", Max: b.MaxDescriptors, What: "descriptors"},
		{Path: "descriptors.entries", Max: b.MaxEntries, What: "entries"},
		{Path: "descriptors.entries.key", Max: b.MaxKeyBytes, What: "bytes"},
		{Path: "descriptors.entries.value", Max: b.MaxValueBytes, What: "bytes"},
	}
}
