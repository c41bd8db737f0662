package events

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/logx"
)

// TestPackedRecordIsADeltaBatch: AppendPacked builds exactly what
// proto.Marshal makes of a DeltaBatch, so any protobuf reader of the
// schema reads the topic; DecodeRecord reads both schemas.
func TestPackedRecordIsADeltaBatch(t *testing.T) {
	ds := []*eventsv1.Delta{delta(1, "a", 1), delta(2, "b", 2), delta(3, "a", 3)}
	var rec []byte
	for _, d := range ds {
		v, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		rec = AppendPacked(rec, v)
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&eventsv1.DeltaBatch{Deltas: ds})
	if err != nil {
		t.Fatal(err)
	}
	if string(rec) != string(want) {
		t.Fatalf("packed record differs from the DeltaBatch's wire form")
	}
	if !IsPacked(rec) {
		t.Fatal("a DeltaBatch not seen as packed")
	}
	got, bad, _, err := DecodeRecord(rec)
	if err != nil || bad != 0 || len(got) != 3 {
		t.Fatalf("DecodeRecord: %d deltas, %d bad, %v", len(got), bad, err)
	}
	for i := range ds {
		if !proto.Equal(got[i], ds[i]) {
			t.Fatalf("delta %d: %v, want %v", i, got[i], ds[i])
		}
	}
	v1, _ := Encode(ds[0])
	if IsPacked(v1) {
		t.Fatal("a v1 delta seen as packed")
	}
	if got, _, _, err := DecodeRecord(v1); err != nil || len(got) != 1 || !proto.Equal(got[0], ds[0]) {
		t.Fatalf("v1 record: %v %v", got, err)
	}
}

// TestDecodeRecordRefusals: what a record must not be, named.
func TestDecodeRecordRefusals(t *testing.T) {
	good, _ := Encode(delta(1, "a", 1))
	invalid := delta(2, "b", 1)
	invalid.Sequence = 0
	bad, _ := proto.Marshal(invalid)
	huge := make([]byte, 0, MaxPackBytes+100)
	for len(huge) <= MaxPackBytes {
		huge = AppendPacked(huge, good)
	}
	var many []byte
	for range MaxPackDeltas + 1 { // small enough, but too many
		many = AppendPacked(many, nil)
	}
	cases := []struct {
		name    string
		rec     []byte
		want    string // in the record's error; "" none
		deltas  int
		badOnes int
	}{
		{"v1 garbage", []byte("garbage"), "bad delta", 0, 0},
		{"empty", nil, "instance_id", 0, 0},
		{"over the bound", huge, "more than", 0, 0},
		{"too many deltas", many, "more than 8192 deltas", 0, 0},
		{"other field after the deltas", append(AppendPacked(nil, good), 0x08, 0x01), "want only deltas", 0, 0},
		{"truncated", AppendPacked(nil, good)[:10], "truncated", 0, 0},
		{"one invalid among good", AppendPacked(AppendPacked(AppendPacked(nil, good), bad), good), "", 2, 1},
		{"all invalid", AppendPacked(nil, bad), "", 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds, nbad, badErr, err := DecodeRecord(c.rec)
			switch {
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one saying %q", err, c.want)
			case c.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case len(ds) != c.deltas || nbad != c.badOnes:
				t.Fatalf("%d deltas and %d bad, want %d and %d", len(ds), nbad, c.deltas, c.badOnes)
			case nbad > 0 && (badErr == nil || !strings.Contains(badErr.Error(), "sequence 0")):
				t.Fatalf("bad delta's reason: %v", badErr)
			}
		})
	}
}

// TestPackKeepsPartitionsAndOrder (property): over random flushes and
// record bounds, every record holds deltas of one partition within the
// bound (a delta alone may exceed it), and reading the records in order
// gives each partition's deltas in their produced order, every one once.
func TestPackKeepsPartitionsAndOrder(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n, parts := rng.IntN(300), 1+rng.IntN(8)
		ds := make([]*eventsv1.Delta, n)
		for i := range ds {
			ds[i] = delta(uint64(i+1), fmt.Sprint(rng.IntN(40)), 1)
			if rng.IntN(20) == 0 {
				ds[i].DescriptorText = strings.Repeat("x", rng.IntN(4000))
			}
		}
		partOf := func(k string) int { return int(murmur2Partition([]byte(k), parts)) }
		max := 200 + rng.IntN(5000)
		var dropped atomic.Uint64
		recs := packer{max: max, partOf: partOf, dropped: &dropped, dropLog: logx.New(nil, 0)}.pack(ds)
		var got []*eventsv1.Delta
		for _, r := range recs {
			rds, bad, _, err := DecodeRecord(r.value)
			if err != nil || bad != 0 || len(rds) != r.deltas {
				t.Fatalf("seed %d: record of %d deltas decodes to %d (%d bad, %v)", seed, r.deltas, len(rds), bad, err)
			}
			if len(r.value) > max && r.deltas > 1 {
				t.Fatalf("seed %d: record of %d bytes over the bound %d", seed, len(r.value), max)
			}
			if partOf(string(r.key)) != r.part || string(r.key) != rds[0].CounterKey {
				t.Fatalf("seed %d: record key %q does not reach its partition %d", seed, r.key, r.part)
			}
			for _, d := range rds {
				if partOf(d.CounterKey) != r.part {
					t.Fatalf("seed %d: %s in partition %d's record", seed, d.CounterKey, r.part)
				}
			}
			got = append(got, rds...)
		}
		if len(got) != n || dropped.Load() != 0 {
			t.Fatalf("seed %d: %d deltas out of %d in (%d dropped)", seed, len(got), n, dropped.Load())
		}
		last := map[int]uint64{}
		for _, d := range got {
			p := partOf(d.CounterKey)
			if d.Sequence <= last[p] {
				t.Fatalf("seed %d: partition %d's sequence %d after %d", seed, p, d.Sequence, last[p])
			}
			last[p] = d.Sequence
		}
	}
}

// TestPackBoundsDeltasPerRecord: a flush of more deltas than a record may
// hold makes several records (the byte bound set aside here).
func TestPackBoundsDeltasPerRecord(t *testing.T) {
	ds := make([]*eventsv1.Delta, 2*MaxPackDeltas+5)
	for i := range ds {
		ds[i] = delta(uint64(i+1), "k", 1)
	}
	var dropped atomic.Uint64
	recs := packer{max: 64 << 20, partOf: func(string) int { return 0 }, dropped: &dropped, dropLog: logx.New(nil, 0)}.pack(ds)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	n := 0
	for _, r := range recs {
		if r.deltas > MaxPackDeltas {
			t.Fatalf("a record of %d deltas", r.deltas)
		}
		n += r.deltas
	}
	if n != len(ds) {
		t.Fatalf("%d deltas in the records, want %d", n, len(ds))
	}
}

// TestRecordSplit: the halves of a record hold its deltas, in order, and
// keep its key and partition.
func TestRecordSplit(t *testing.T) {
	for n := 2; n <= 9; n++ {
		var ds []*eventsv1.Delta
		for i := range n {
			ds = append(ds, delta(uint64(i+1), "k", uint64(i+1)))
		}
		var dropped atomic.Uint64
		recs := packer{max: MaxPackBytes, partOf: func(string) int { return 3 }, dropped: &dropped, dropLog: logx.New(nil, 0)}.pack(ds)
		if len(recs) != 1 {
			t.Fatalf("%d records for %d small deltas", len(recs), n)
		}
		a, z := recs[0].split()
		seq := uint64(0)
		for _, h := range []record{a, z} {
			if string(h.key) != string(recs[0].key) || h.part != 3 || h.deltas == 0 {
				t.Fatalf("half %+v", h)
			}
			got, _, _, err := DecodeRecord(h.value)
			if err != nil || len(got) != h.deltas {
				t.Fatalf("half of %d: %d deltas, %v", h.deltas, len(got), err)
			}
			for _, d := range got {
				if seq++; d.Sequence != seq {
					t.Fatalf("sequence %d, want %d", d.Sequence, seq)
				}
			}
		}
		if seq != uint64(n) {
			t.Fatalf("halves hold %d of %d", seq, n)
		}
		if len(a.value) > 0 && cap(a.value) != len(a.value) {
			t.Fatal("the first half could grow into the second")
		}
	}
}

// FuzzDecodeRecord: any bytes decode to valid deltas or an error, never a
// panic; what decodes packs back to a record that decodes the same.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := Encode(delta(1, "a", 1))
	f.Add(good)
	f.Add(AppendPacked(AppendPacked(nil, good), good))
	f.Add([]byte{0x82, 0x02, 0x00})
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, _, _, err := DecodeRecord(b)
		if err != nil || len(ds) == 0 {
			return
		}
		var rec []byte
		for _, d := range ds {
			if Validate(d) != nil {
				t.Fatalf("an invalid delta decoded: %v", d)
			}
			v, err := Encode(d)
			if err != nil {
				t.Fatal(err)
			}
			rec = AppendPacked(rec, v)
		}
		again, bad, _, err := DecodeRecord(rec)
		if err != nil || bad != 0 || len(again) != len(ds) {
			t.Fatalf("re-packed: %d of %d, %d bad, %v", len(again), len(ds), bad, err)
		}
	})
}
