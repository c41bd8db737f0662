package events

import (
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/logx"
)

// record is one v2 record on its way to a bus: deltas of one partition.
type record struct {
	key    []byte // the first delta's counter key, which reaches the partition
	value  []byte // the DeltaBatch's wire form
	deltas int
	part   int
}

// packer builds v2 records from a flush's deltas.
type packer struct {
	max       int                         // bytes per record at most
	perRecord int                         // deltas per record at most (0: MaxPackDeltas; 1: no packing)
	partOf    func(counterKey string) int // the partition a counter key reaches
	dropped   *atomic.Uint64
	dropLog   *logx.Limited
}

// pack returns deltas as records of one partition each, at most p.max
// bytes (a delta alone may fill one), keeping each partition's deltas in
// their order; deltas that can never be delivered are set aside.
func (p packer) pack(deltas []*eventsv1.Delta) []record {
	var out []record
	open := map[int]int{} // partition → its record in out still filling
	per := p.perRecord
	if per <= 0 {
		per = MaxPackDeltas
	}
	for _, d := range deltas {
		v, err := encodeDelta(d)
		if err != nil {
			setAside(p.dropped, p.dropLog, d.GetCounterKey(), 1, err)
			continue
		}
		part := p.partOf(d.CounterKey)
		i, ok := open[part]
		if ok && (len(out[i].value)+PackedSize(len(v)) > p.max || out[i].deltas >= per) {
			ok = false // full: the partition's next deltas start a record behind it
		}
		if !ok {
			i = len(out)
			open[part] = i
			out = append(out, record{key: []byte(d.CounterKey), part: part})
		}
		r := &out[i]
		r.value = AppendPacked(r.value, v)
		r.deltas++
	}
	return out
}

// split halves a record of several deltas (the broker refused it for
// good): both halves keep the key, so they reach the same partition, in
// order.
func (r record) split() (record, record) {
	half := r.deltas / 2
	b := r.value
	var cut int
	for range half {
		_, _, n := protowire.ConsumeField(b[cut:])
		cut += n
	}
	a := record{key: r.key, value: r.value[:cut:cut], deltas: half, part: r.part}
	z := record{key: r.key, value: r.value[cut:], deltas: r.deltas - half, part: r.part}
	return a, z
}
