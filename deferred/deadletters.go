package deferred

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/velvetrope/velvetrope/events"
)

// MemDeadLetters is a dead-letter topic in memory that nobody consumes
// (`velvetrope dev`): it keeps the newest records within maxBytes and lets
// the oldest go. It never refuses a record, so a drain never waits on it
// holding its items (an in-memory bus that filled up did: dev stopped
// draining after 65,536 dead letters, each up to 800 KB held). What was
// set aside is still counted and logged by the drain. Safe for concurrent
// use.
type MemDeadLetters struct {
	mu       sync.Mutex
	recs     []events.Message // oldest first
	bytes    int64
	maxBytes int64

	// Dropped counts records let go to stay within the bound.
	Dropped atomic.Uint64
}

// NewMemDeadLetters returns a dead-letter topic keeping at most maxBytes
// of records (keys and values; at least one record, whatever its size).
func NewMemDeadLetters(maxBytes int64) *MemDeadLetters {
	return &MemDeadLetters{maxBytes: maxBytes}
}

// Publish implements events.Publisher.
func (m *MemDeadLetters) Publish(_ context.Context, msgs []events.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range msgs {
		m.recs = append(m.recs, r)
		m.bytes += int64(len(r.Key) + len(r.Value))
	}
	drop := 0
	for m.bytes > m.maxBytes && drop < len(m.recs)-1 {
		m.bytes -= int64(len(m.recs[drop].Key) + len(m.recs[drop].Value))
		drop++
	}
	if drop > 0 {
		m.Dropped.Add(uint64(drop))
		m.recs = append(m.recs[:0:0], m.recs[drop:]...) // a new array: the dropped values go
	}
	return nil
}

// Held returns the records kept, newest last.
func (m *MemDeadLetters) Held() []events.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]events.Message(nil), m.recs...)
}

// Close implements events.Publisher.
func (m *MemDeadLetters) Close(context.Context) error { return nil }
