package events

import (
	"fmt"
	"sync/atomic"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/logx"
)

// encodeDelta is the wire form of d as every bus carries it: valid, and
// within MaxRecordBytes, or an error saying why it can never be
// delivered. One home for the bound, so that a delta the in-memory bus
// takes is one Kafka takes too.
func encodeDelta(d *eventsv1.Delta) ([]byte, error) {
	v, err := Encode(d)
	if err == nil && len(v) > MaxRecordBytes {
		err = fmt.Errorf("encoded delta of %d bytes exceeds %d", len(v), MaxRecordBytes)
	}
	return v, err
}

// setAside records k deltas that can never be delivered: counted in n and
// logged through log (at most one line per its interval, with how many it
// suppressed). Every producer does this instead of returning an error:
// the checker retries a refused batch ahead of every later delta, so one
// record that fails for good would stop all counting behind it.
func setAside(n *atomic.Uint64, log *logx.Limited, key string, k int, err error) {
	n.Add(uint64(k))
	if len(key) > 200 {
		key = key[:200] + "…"
	}
	log.Warn("delta set aside: it can never be delivered", "counter_key", key, "deltas", k, "error", err,
		"dropped_total", n.Load())
}
