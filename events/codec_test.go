package events

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/velvetrope/velvetrope/config"
	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
)

const w0 = int64(1_700_006_400) * 1e9

func delta(seq uint64, key string, cost uint64) *eventsv1.Delta {
	return &eventsv1.Delta{InstanceId: "checker-1/abc", Sequence: seq, Domain: "api", RuleId: "api:user_id",
		DescriptorText: "user_id=" + key, CounterKey: "api:user_id|user_id=" + key, Algorithm: "fixed_window",
		WindowStartUnixNanos: w0, WindowNanos: 60e9, Limit: 100, AllowedCount: cost, AllowedCost: cost,
		CountedCost: cost, FirstUnixNanos: w0 + 1, LastUnixNanos: w0 + 2}
}

func TestCodecRoundTrip(t *testing.T) {
	d := delta(7, "priya", 3)
	d.DeniedCount, d.DeniedCost, d.ShadowDeniedCount, d.DeferredCount = 1, 2, 4, 5
	b, err := Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, d) {
		t.Fatalf("round trip: got %v, want %v", got, d)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*eventsv1.Delta)
	}{
		{"no nonce", func(d *eventsv1.Delta) { d.InstanceId = "checker-1" }},
		{"sequence 0", func(d *eventsv1.Delta) { d.Sequence = 0 }},
		{"no counter key", func(d *eventsv1.Delta) { d.CounterKey = "" }},
		{"no window", func(d *eventsv1.Delta) { d.WindowNanos = 0 }},
		{"unaligned window", func(d *eventsv1.Delta) { d.WindowStartUnixNanos = w0 + 1 }},
		{"negative limit", func(d *eventsv1.Delta) { d.Limit = -1 }},
		{"timestamps reversed", func(d *eventsv1.Delta) { d.LastUnixNanos = d.FirstUnixNanos - 1 }},
		{"counted above seen", func(d *eventsv1.Delta) { d.CountedCost = 99 }},
		{"counted above seen and late", func(d *eventsv1.Delta) { d.CountedCost, d.LateCount, d.LateCost = 99, 1, 97 }},
		{"late count above its cost", func(d *eventsv1.Delta) { d.LateCount, d.LateCost, d.CountedCost = 3, 2, 3 }},
		{"unknown algorithm", func(d *eventsv1.Delta) { d.Algorithm = "magic" }},
		{"bucket without rate", func(d *eventsv1.Delta) { d.Algorithm, d.WindowStartUnixNanos = "gcra", 0 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := delta(1, "x", 1)
			c.mut(d)
			if _, err := Encode(d); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("Encode: got %v, want ErrBadRecord", err)
			}
			raw, _ := proto.Marshal(d)
			if _, err := Decode(raw); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("Decode: got %v, want ErrBadRecord", err)
			}
		})
	}
	late := delta(1, "x", 1)
	late.LateCount, late.LateCost, late.CountedCost = 2, 97, 98 // a late charge is counted too
	if _, err := Encode(late); err != nil {
		t.Fatalf("a delta with late charges: %v", err)
	}
	huge := delta(1, "x", 1)
	huge.AllowedCost, huge.LateCost, huge.CountedCost = 1<<63, 1<<63, 5 // the parts' sum wraps: accepted, not refused as small
	if _, err := Encode(huge); err != nil {
		t.Fatalf("wrapping parts: %v", err)
	}
	if _, err := Decode([]byte{0xff, 0xff, 0xff}); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("garbage: got %v", err)
	}
	if _, err := Decode(make([]byte, MaxRecordBytes+1)); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("oversized: got %v", err)
	}
}

// TestValidateKnowsEveryAlgorithm (issue 19, item 3): a delta of every
// algorithm a rule can name (config.Algorithms), in the shape the checker
// builds it — a bucket's rate, or the window its counter rolls — passes
// validation; `sliding_log` (mode: sync) used to be refused, which stopped
// the in-memory pipeline and lost the rule's analytics on Kafka.
func TestValidateKnowsEveryAlgorithm(t *testing.T) {
	for _, alg := range config.Algorithms() {
		t.Run(string(alg)+"_", func(t *testing.T) {
			d := delta(1, "x", 1)
			d.Algorithm = string(alg)
			if alg.Bucket() {
				d.WindowStartUnixNanos, d.RateTokens, d.Burst, d.TatAfterUnixNanos = 0, 100, 100, w0+5
			}
			if err := Validate(d); err != nil {
				t.Fatalf("a %q delta: %v", alg, err)
			}
			if _, err := Encode(d); err != nil {
				t.Fatalf("Encode: %v", err)
			}
		})
	}
}

// FuzzDecode: no input panics; whatever decodes re-encodes to a delta that
// decodes to the same value.
func FuzzDecode(f *testing.F) {
	b, _ := Encode(delta(1, "a", 1))
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x03, 'a', '/', 'b'})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error is not ErrBadRecord: %v", err)
			}
			return
		}
		again, err := Encode(d)
		if err != nil {
			t.Fatalf("a decoded delta does not encode: %v", err)
		}
		d2, err := Decode(again)
		if err != nil || !proto.Equal(d, d2) {
			t.Fatalf("re-decode differs: %v %v", d2, err)
		}
	})
}
