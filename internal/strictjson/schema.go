// Package strictjson decodes the JSON bodies clients send, strictly and
// within bounds: every surface that takes JSON from a client (POST
// /v1/check, Envoy's /json, the admin API) decodes through it, so they
// refuse the same things the same way.
//
// encoding/json (and, less so, protojson) accepts what a strict reader
// must not: field names matched case-insensitively, a field given twice
// (the last wins: `"domain":"api","Domain":"shop"` was decided in shop),
// invalid UTF-8 and lone UTF-16 surrogates turned silently into U+FFFD.
// And both build the whole value before any bound can be looked at: a
// 1 MiB body of 350,000 empty entries was 350,000 allocated entries before
// the checker refused the ninth.
//
// A [Schema] is the shape of one body: the exact field names of every
// object (derived from the Go type's json tags or from a protobuf message
// descriptor) and bounds on the arrays and strings it may hold. [Schema.Decode]
// first scans the body against it, allocating nothing: the scan stops at
// the first thing wrong (an unknown or duplicate field, bytes that are not
// UTF-8, a lone surrogate, a value of the wrong kind, an array or string
// past its bound) and names the field, with its indices
// (`descriptors[3].entries: more than 8 entries`). Only a body that passes
// is handed to encoding/json (or protojson), which then cannot see any of
// the things above.
package strictjson

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// kind is what JSON a node accepts (null is accepted everywhere: it means
// absent to both decoders).
type kind uint8

const (
	kAny    kind = iota // any JSON value, checked for UTF-8, surrogates and duplicate names
	kObject             // an object of known fields
	kMap                // an object of any names; values elem
	kArray              // elements elem
	kString
	kBool
	kInt      // an integer that fits bits (signed)
	kUint     // a non-negative integer that fits bits
	kFloat    // any number
	kPBNumber // protojson's numbers: a number or a string (quoted 64-bit integers, "NaN")
	kPBEnum   // protojson's enums: a name or a number
)

var kindNames = [...]string{kAny: "any value", kObject: "an object", kMap: "an object", kArray: "an array",
	kString: "a string", kBool: "true or false", kInt: "an integer", kUint: "a non-negative integer",
	kFloat: "a number", kPBNumber: "a number", kPBEnum: "an enum name or number"}

// node is the shape of one value.
type node struct {
	kind   kind
	bits   int     // kInt, kUint: the integer's size
	fields []field // kObject
	elem   *node   // kArray, kMap
	// max bounds an array's elements or a string's bytes (decoded); 0:
	// none but the body's size. what names the unit in the message.
	max  int
	what string
}

// field is one name an object accepts; the names of one field (protojson
// takes the JSON and the proto name) share an index, so giving both is a
// duplicate.
type field struct {
	name  string // as it must appear
	canon string // the name errors and bounds use
	index int
	node  *node
}

// Schema is the shape of one kind of body, with its bounds. Safe for
// concurrent use; build one per handler, not per request.
type Schema struct {
	root      *node
	unmarshal func([]byte, any) error
}

// Bound limits one array's elements or one string's bytes (as decoded:
// an escape counts as the bytes it stands for). Path names the value by
// its fields' names joined with dots, arrays stepped through
// ("descriptors.entries.key": the key of every entry of every
// descriptor); What is the unit the message gives ("entries", "bytes").
type Bound struct {
	Path string
	Max  int
	What string
}

// For returns the schema of Go type T as encoding/json reads it (json
// tags, embedded structs flattened), with bounds; decoding unmarshals with
// encoding/json. It refuses types it cannot describe exactly (",string"
// fields, ambiguous embedded names) and bounds whose path is not a field
// of T.
func For[T any](bounds ...Bound) (*Schema, error) {
	root, err := goNode(reflect.TypeFor[T](), map[reflect.Type]*node{})
	if err != nil {
		return nil, fmt.Errorf("strictjson: %v: %w", reflect.TypeFor[T](), err)
	}
	s := &Schema{root: root, unmarshal: json.Unmarshal}
	return s, s.bound(bounds)
}

// MustFor is For for schemas built from constants: it panics on what For
// refuses, a programming error every test of the caller finds at once.
func MustFor[T any](bounds ...Bound) *Schema {
	s, err := For[T](bounds...)
	if err != nil {
		panic(err)
	}
	return s
}

// ForProto returns the schema of message m as protojson reads it (each
// field by its JSON name or its proto name, quoted 64-bit integers, enum
// names, the well-known types), with bounds whose paths use the proto
// names; decoding unmarshals into a proto.Message with protojson.
func ForProto(m proto.Message, bounds ...Bound) (*Schema, error) {
	md := m.ProtoReflect().Descriptor()
	root := protoNode(md, map[protoreflect.FullName]*node{})
	if wide := tooWide(root, map[*node]bool{}); wide != "" {
		return nil, fmt.Errorf("strictjson: %s: %s", md.FullName(), wide)
	}
	s := &Schema{root: root, unmarshal: func(b []byte, v any) error {
		pm, ok := v.(proto.Message)
		if !ok {
			return fmt.Errorf("strictjson: %T is not a proto.Message", v)
		}
		return protojson.Unmarshal(b, pm)
	}}
	return s, s.bound(bounds)
}

// MustForProto is ForProto for constant bounds; it panics where ForProto
// returns an error.
func MustForProto(m proto.Message, bounds ...Bound) *Schema {
	s, err := ForProto(m, bounds...)
	if err != nil {
		panic(err)
	}
	return s
}

// bound sets each bound on the node its path names. Only a recursive
// type's nodes are shared (goNode), so a bound bounds what its path names.
func (s *Schema) bound(bounds []Bound) error {
	for _, b := range bounds {
		n := s.root
		for _, name := range strings.Split(b.Path, ".") {
			for n.kind == kArray {
				n = n.elem
			}
			var next *node
			for i := range n.fields {
				if n.fields[i].canon == name {
					next = n.fields[i].node
					break
				}
			}
			if next == nil {
				return fmt.Errorf("strictjson: bound %q: no field %q", b.Path, name)
			}
			n = next
		}
		if n.kind != kArray && n.kind != kString || b.Max < 1 || b.What == "" {
			return fmt.Errorf("strictjson: bound %q: want an array or a string, Max >= 1 and What, got %s, %d, %q",
				b.Path, kindNames[n.kind], b.Max, b.What)
		}
		n.max, n.what = b.Max, b.What
	}
	return nil
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// goNode describes t as encoding/json decodes into it. seen holds the
// types being described on the way down: only a recursive type shares a
// node, so a bound on one field never bounds another of the same type.
func goNode(t reflect.Type, seen map[reflect.Type]*node) (*node, error) {
	if n, ok := seen[t]; ok {
		return n, nil
	}
	pt := reflect.PointerTo(t)
	switch {
	case t.Implements(jsonUnmarshaler) || pt.Implements(jsonUnmarshaler):
		return &node{kind: kAny}, nil // its own reader: any JSON, still strict
	case t.Implements(textUnmarshaler) || pt.Implements(textUnmarshaler):
		return &node{kind: kString}, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return goNode(t.Elem(), seen)
	case reflect.Interface:
		return &node{kind: kAny}, nil
	case reflect.String:
		return &node{kind: kString}, nil
	case reflect.Bool:
		return &node{kind: kBool}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &node{kind: kInt, bits: t.Bits()}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &node{kind: kUint, bits: t.Bits()}, nil
	case reflect.Float32, reflect.Float64:
		return &node{kind: kFloat}, nil
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return &node{kind: kString}, nil // []byte: base64
		}
		n := &node{kind: kArray}
		seen[t] = n
		defer delete(seen, t)
		e, err := goNode(t.Elem(), seen)
		n.elem = e
		return n, err
	case reflect.Map:
		switch t.Key().Kind() {
		case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			return nil, fmt.Errorf("map key %v: not a key encoding/json reads", t.Key())
		}
		n := &node{kind: kMap}
		seen[t] = n
		defer delete(seen, t)
		e, err := goNode(t.Elem(), seen)
		n.elem = e
		return n, err
	case reflect.Struct:
		n := &node{kind: kObject}
		seen[t] = n
		defer delete(seen, t)
		if err := goFields(t, n, seen, map[string]bool{}); err != nil {
			return nil, err
		}
		if len(n.fields) > 64 {
			return nil, fmt.Errorf("%v: %d fields, more than the 64 a scan tracks", t, len(n.fields))
		}
		return n, nil
	}
	return nil, fmt.Errorf("%v: a kind encoding/json cannot read", t)
}

// goFields adds t's fields to n, flattening embedded structs as
// encoding/json does; names must be unique (encoding/json would drop an
// ambiguous one silently).
func goFields(t reflect.Type, n *node, seen map[reflect.Type]*node, names map[string]bool) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",string,") {
			return fmt.Errorf("field %s: the ,string option is not supported", f.Name)
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			if err := goFields(ft, n, seen, names); err != nil {
				return err
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if names[name] {
			return fmt.Errorf("field name %q appears twice", name)
		}
		names[name] = true
		fn, err := goNode(f.Type, seen)
		if err != nil {
			return fmt.Errorf("field %s: %w", name, err)
		}
		n.fields = append(n.fields, field{name: name, canon: name, index: len(n.fields), node: fn})
	}
	return nil
}

// tooWide names an object of more fields than the scan's set of seen
// fields holds (64), "" when there is none.
func tooWide(n *node, seen map[*node]bool) string {
	if n == nil || seen[n] {
		return ""
	}
	seen[n] = true
	for _, f := range n.fields {
		if f.index >= 64 {
			return fmt.Sprintf("more than the 64 fields a scan tracks in one object (%s)", f.canon)
		}
		if w := tooWide(f.node, seen); w != "" {
			return w
		}
	}
	return tooWide(n.elem, seen)
}

// protoNode describes message md as protojson reads it.
func protoNode(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]*node) *node {
	switch md.FullName() {
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value":
		return &node{kind: kPBNumber}
	case "google.protobuf.BoolValue":
		return &node{kind: kBool}
	case "google.protobuf.StringValue", "google.protobuf.BytesValue", "google.protobuf.Duration",
		"google.protobuf.Timestamp", "google.protobuf.FieldMask":
		return &node{kind: kString}
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Any":
		return &node{kind: kAny}
	}
	if n, ok := seen[md.FullName()]; ok {
		return n
	}
	n := &node{kind: kObject}
	seen[md.FullName()] = n // on the way down only, as in goNode
	defer delete(seen, md.FullName())
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		fn := protoField(fd, seen)
		canon := string(fd.Name())
		n.fields = append(n.fields, field{name: fd.JSONName(), canon: canon, index: i, node: fn})
		if canon != fd.JSONName() {
			n.fields = append(n.fields, field{name: canon, canon: canon, index: i, node: fn})
		}
	}
	return n
}

func protoField(fd protoreflect.FieldDescriptor, seen map[protoreflect.FullName]*node) *node {
	switch {
	case fd.IsMap():
		return &node{kind: kMap, elem: protoValue(fd.MapValue(), seen)}
	case fd.IsList():
		return &node{kind: kArray, elem: protoValue(fd, seen)}
	}
	return protoValue(fd, seen)
}

// protoValue describes one value of fd (an element, for a list).
func protoValue(fd protoreflect.FieldDescriptor, seen map[protoreflect.FullName]*node) *node {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return protoNode(fd.Message(), seen)
	case protoreflect.StringKind, protoreflect.BytesKind:
		return &node{kind: kString}
	case protoreflect.BoolKind:
		return &node{kind: kBool}
	case protoreflect.EnumKind:
		return &node{kind: kPBEnum}
	}
	return &node{kind: kPBNumber}
}
