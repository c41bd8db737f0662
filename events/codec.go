package events

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// SchemaHeader is the Kafka header naming the schema of a message's value:
// SchemaV1 for one eventsv1.Delta, SchemaV2 for an eventsv1.DeltaBatch.
// Readers do not need it (DecodeRecord tells the two apart by content);
// it is there for other consumers of the topic.
const (
	SchemaHeader = "velvetrope-schema"
	SchemaV1     = "v1"
	SchemaV2     = "v2"
)

// MaxRecordBytes bounds one encoded delta; anything larger is malformed.
const MaxRecordBytes = 64 << 10

// MaxPackBytes bounds a v2 record: producers pack at most this much (well
// under Kafka's default max.message.bytes of 1 MiB, so the broker takes a
// record whole) and readers refuse anything larger.
const MaxPackBytes = 960 << 10

// MaxPackDeltas bounds the deltas of a v2 record, so that one record
// cannot make an aggregator's batch or its reader's work unbounded (a
// flush packs a few thousand at most; readers refuse more).
const MaxPackDeltas = 8192

// packField is DeltaBatch.deltas' field number: v1 fields are numbered
// below it, so a record's first tag says which schema it is.
const packField protowire.Number = 32

// DecodeError is a record that is not a valid v1 delta.
type DecodeError struct {
	Reason string
}

func (e *DecodeError) Error() string { return "events: bad delta: " + e.Reason }

// ErrBadRecord matches every *DecodeError with errors.Is.
var ErrBadRecord = errors.New("events: bad delta")

// Is makes errors.Is(err, ErrBadRecord) true.
func (e *DecodeError) Is(target error) bool { return target == ErrBadRecord }

// Encode returns the wire form of d.
func Encode(d *eventsv1.Delta) ([]byte, error) {
	if err := Validate(d); err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(d)
}

// AppendEncode appends the wire form of d to b.
func AppendEncode(b []byte, d *eventsv1.Delta) ([]byte, error) {
	if err := Validate(d); err != nil {
		return b, err
	}
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, d)
}

// IsPacked reports whether a record's value is a v2 DeltaBatch (its first
// field is DeltaBatch.deltas), not a v1 Delta.
func IsPacked(b []byte) bool {
	n, _, l := protowire.ConsumeTag(b)
	return l > 0 && n == packField
}

// AppendPacked appends one encoded delta (Encode's output) to a v2 record
// being built in b: DeltaBatch's wire form is its deltas' each behind a
// field tag and length, so a record grows without re-encoding.
func AppendPacked(b, encoded []byte) []byte {
	b = protowire.AppendTag(b, packField, protowire.BytesType)
	return protowire.AppendBytes(b, encoded)
}

// PackedSize is what AppendPacked adds for an encoded delta of n bytes.
func PackedSize(n int) int {
	return protowire.SizeTag(packField) + protowire.SizeBytes(n)
}

// DecodeRecord parses one record's value of either schema into its
// deltas. err: the record as a whole is unreadable (too large, not
// protobuf, no delta). bad: the deltas of a readable v2 record that are
// invalid, left out of ds with the first one's reason in badErr, so that
// one broken delta does not cost its record's others.
func DecodeRecord(b []byte) (ds []*eventsv1.Delta, bad int, badErr, err error) {
	if !IsPacked(b) {
		d, err := Decode(b)
		if err != nil {
			return nil, 0, nil, err
		}
		return []*eventsv1.Delta{d}, 0, nil, nil
	}
	if len(b) > MaxPackBytes {
		return nil, 0, nil, &DecodeError{fmt.Sprintf("packed record of %d bytes, more than %d", len(b), MaxPackBytes)}
	}
	for fields := 0; len(b) > 0; fields++ {
		if fields == MaxPackDeltas {
			return nil, 0, nil, &DecodeError{fmt.Sprintf("packed record of more than %d deltas", MaxPackDeltas)}
		}
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != packField || typ != protowire.BytesType {
			return nil, 0, nil, &DecodeError{"packed record: want only deltas (field 32, length-delimited)"}
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return nil, 0, nil, &DecodeError{"packed record: truncated delta"}
		}
		b = b[n+m:]
		d, derr := Decode(v)
		if derr != nil {
			if bad++; badErr == nil {
				badErr = derr
			}
			continue
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 && bad == 0 {
		return nil, 0, nil, &DecodeError{"packed record holds no delta"}
	}
	return ds, bad, badErr, nil
}

// Decode parses and validates one v1 record's value (one delta).
func Decode(b []byte) (*eventsv1.Delta, error) {
	if len(b) > MaxRecordBytes {
		return nil, &DecodeError{fmt.Sprintf("%d bytes, more than %d", len(b), MaxRecordBytes)}
	}
	d := &eventsv1.Delta{}
	if err := proto.Unmarshal(b, d); err != nil {
		return nil, &DecodeError{err.Error()}
	}
	if err := Validate(d); err != nil {
		return nil, err
	}
	return d, nil
}

// Validate checks the invariants every delta keeps, so a corrupt or foreign
// record is rejected before it can touch a counter.
func Validate(d *eventsv1.Delta) error {
	bad := func(format string, args ...any) error { return &DecodeError{fmt.Sprintf(format, args...)} }
	switch {
	case d == nil:
		return bad("nil")
	case d.InstanceId == "" || !strings.Contains(d.InstanceId, "/"):
		return bad("instance_id %q: want name/nonce", d.InstanceId)
	case d.Sequence == 0:
		return bad("sequence 0 (sequences start at 1)")
	case d.Domain == "" || d.RuleId == "" || d.CounterKey == "":
		return bad("domain, rule_id and counter_key are required")
	case d.WindowNanos <= 0:
		return bad("window_nanos %d: must be > 0", d.WindowNanos)
	case d.Limit < 0:
		return bad("limit %d: must not be negative", d.Limit)
	case d.FirstUnixNanos <= 0 || d.LastUnixNanos < d.FirstUnixNanos:
		return bad("timestamps first=%d last=%d: want 0 < first <= last", d.FirstUnixNanos, d.LastUnixNanos)
	case !within(d.CountedCost, d.AllowedCost, d.DeniedCost, d.LateCost):
		return bad("counted_cost %d exceeds allowed %d + denied %d + late %d", d.CountedCost, d.AllowedCost, d.DeniedCost, d.LateCost)
	case d.LateCount > d.LateCost:
		return bad("late_count %d exceeds late_cost %d (a charge costs at least one hit)", d.LateCount, d.LateCost)
	}
	// Every algorithm a rule can run is known here (config.Algorithms):
	// buckets carry their rate, everything else the window its counter
	// rolls (a sliding log's checker entry keeps windows too).
	switch alg := config.Algorithm(d.Algorithm); {
	case !alg.Known():
		return bad("unknown algorithm %q", d.Algorithm)
	case alg.Bucket():
		if d.RateTokens <= 0 || d.Burst <= 0 {
			return bad("bucket delta needs rate_tokens and burst > 0, got %d and %d", d.RateTokens, d.Burst)
		}
	default:
		if d.WindowStartUnixNanos <= 0 || d.WindowStartUnixNanos%d.WindowNanos != 0 {
			return bad("window_start %d: must be a positive multiple of window_nanos %d", d.WindowStartUnixNanos, d.WindowNanos)
		}
	}
	return nil
}

// within says v <= the sum of parts, the sum taken without wrapping (a
// foreign record's huge parts must not wrap around to a small sum).
func within(v uint64, parts ...uint64) bool {
	var sum uint64
	for _, p := range parts {
		var carry uint64
		if sum, carry = bits.Add64(sum, p, 0); carry != 0 {
			return true
		}
	}
	return v <= sum
}
