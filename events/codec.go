package events

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

// SchemaHeader is the Kafka header naming the schema of a message's value,
// and SchemaV1 its value for eventsv1.Delta.
const (
	SchemaHeader = "velvetrope-schema"
	SchemaV1     = "v1"
)

// MaxRecordBytes bounds one encoded delta; anything larger is malformed.
const MaxRecordBytes = 64 << 10

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

// Decode parses and validates one record's value.
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
	case d.CountedCost > d.AllowedCost+d.DeniedCost:
		return bad("counted_cost %d exceeds allowed %d + denied %d", d.CountedCost, d.AllowedCost, d.DeniedCost)
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
