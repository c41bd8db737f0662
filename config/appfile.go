package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// appDecoder reads a YAML document onto a Go value whose fields carry yaml
// tags (the application config), checking every key against the fields
// and every value against its field's type, at any depth and inside lists.
// yaml.v3's own strict mode stops at the first problem and names a Go type
// ("field adr2 not found in type config.HTTPConfig"); this one reports
// every problem by key path, with the key's position and the known keys:
//
//	velvetrope.yaml:2:3: http.adr2: unknown field; known: addr, tls, ...
//	velvetrope.yaml:4:17: rules_reload: want a duration such as 250ms, 5s or 1h30m, got "soon"
//
// Scalars are still decoded by yaml.v3 (its notation of integers, bools
// and durations), one leaf at a time. Keys absent from the file keep the
// value already there (the defaults).
type appDecoder struct {
	file string
	errs ErrorList
	// keys is the node of every key and list item the file sets, by key
	// path: where a later error (validation) about that setting points.
	keys map[string]*yaml.Node
}

var durationType = reflect.TypeFor[time.Duration]()

// decodeAppFile decodes data, the file named file, onto out (a pointer to
// a struct). It returns the position of every key path set, and every
// problem found.
func decodeAppFile(file string, data []byte, out any) (map[string]*yaml.Node, ErrorList) {
	d := &appDecoder{file: file, keys: map[string]*yaml.Node{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, ErrorList{yamlError(file, err)}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 { // an empty file: the defaults
		return d.keys, nil
	}
	d.value(doc.Content[0], reflect.ValueOf(out).Elem(), "")
	return d.keys, d.errs
}

// errorf records a problem at n about the setting at path.
func (d *appDecoder) errorf(n *yaml.Node, path, format string, args ...any) {
	if path == "" {
		path = "(top level)"
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Column: n.Column, Key: path, Msg: fmt.Sprintf(format, args...)})
}

// value decodes n onto v, the setting at path.
func (d *appDecoder) value(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "key:" with nothing: the default stays, as yaml.v3 does
	}
	switch {
	case v.Kind() == reflect.Struct:
		d.mapping(n, v, path)
	case v.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "want a list, got %s", describeNode(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			d.keys[ip] = item
			d.value(item, s.Index(i), ip)
		}
		v.Set(s)
	default:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "want %s, got %s", wantOf(v.Type()), describeNode(n))
			return
		}
		// yaml.v3 takes 1.5 for an integer (as 1) and a quoted "yes" for a
		// bool: a setting is what it says, or an error
		k := v.Type().Kind()
		isInt := k >= reflect.Int && k <= reflect.Uintptr && v.Type() != durationType
		if isInt && n.ShortTag() == "!!float" || k == reflect.Bool && n.ShortTag() != "!!bool" {
			d.errorf(n, path, "want %s, got %s", wantOf(v.Type()), describeNode(n))
			return
		}
		// decoded into a fresh value: a failed decode leaves the default
		fresh := reflect.New(v.Type())
		if err := n.Decode(fresh.Interface()); err != nil {
			d.errorf(n, path, "want %s, got %s", wantOf(v.Type()), describeNode(n))
			return
		}
		v.Set(fresh.Elem())
	}
}

// mapping decodes the mapping n onto the struct v: merge keys (<<) first,
// then the keys written out, which override what they merged.
func (d *appDecoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got %s", describeNode(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, val := n.Content[i], n.Content[i+1]; k.Tag == "!!merge" {
			d.merge(val, v, path)
		}
	}
	names, fields := yamlFields(v.Type())
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" {
			continue
		}
		key := clip(k.Value)
		kp := key
		if path != "" {
			kp = path + "." + key
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "want a key name, got %s", describeNode(k))
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			d.errorf(k, kp, "set twice (first at line %d)", prev.Line)
			continue
		}
		seen[k.Value] = k
		f, ok := fields[k.Value]
		if !ok {
			d.errorf(k, kp, "unknown field; known: %s", strings.Join(names, ", "))
			continue
		}
		d.keys[kp] = k
		d.value(val, v.FieldByIndex(f), kp)
	}
}

// merge applies a merge key's value (a mapping, or a list of them) to v.
func (d *appDecoder) merge(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.SequenceNode {
		for _, m := range n.Content {
			d.mapping(derefAlias(m), v, path)
		}
		return
	}
	d.mapping(n, v, path)
}

func derefAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// yamlFields lists t's YAML keys in field order, and the field of each.
func yamlFields(t reflect.Type) ([]string, map[string][]int) {
	var names []string
	fields := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name) // yaml.v3's default
		}
		names = append(names, name)
		fields[name] = f.Index
	}
	return names, fields
}

// wantOf says what a setting of type t takes.
func wantOf(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 250ms, 5s or 1h30m"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return fmt.Sprintf("an integer from %d to %d", minInt(t), maxInt(t))
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uintptr:
		return fmt.Sprintf("an integer from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	}
	return t.String()
}

func maxInt(t reflect.Type) int64 { return math.MaxInt64 >> (64 - t.Bits()) }
func minInt(t reflect.Type) int64 { return -maxInt(t) - 1 }

// describeNode says what the file has at n: the value itself (clipped to
// a line; quoted when it is a string), or its kind.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!str" || n.Tag == "" {
			return strconv.Quote(clip(n.Value))
		}
		return clip(n.Value)
	}
	return "an unknown node"
}
