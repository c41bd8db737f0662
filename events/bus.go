package events

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/logx"
)

// Producer sends deltas. Produce returns nil once every delta is durably
// accepted (acknowledged by the bus, or written to a spill file), and an
// error when none of them was, or not all: the caller keeps them and
// produces them again, in order, and copies are dropped downstream by
// (instance, sequence). Deltas of one counter key keep their order.
//
// A delta that can never be delivered — invalid, larger than
// MaxRecordBytes, refused by the bus for what it is — is set aside:
// counted ([DropCounter]), logged at a bounded rate, and never returned as
// an error, so that it cannot hold up the deltas produced with it or after
// it (the checker keeps a refused batch ahead of every later delta).
// Implementations are safe for concurrent use, but the checker calls
// Produce from its one flusher goroutine, never from the request path.
type Producer interface {
	Produce(ctx context.Context, deltas []*eventsv1.Delta) error
	Close(ctx context.Context) error
}

// DropCounter is a producer that counts the deltas it set aside for good
// ([KafkaProducer], [MemBus]), for the process's metrics.
type DropCounter interface {
	DroppedDeltas() uint64
}

// Publisher appends raw records to a topic, partitioned by key, and
// returns nil once every one is acknowledged (the deferred queue and its
// dead letters: records whose loss a caller must hear of at once, so no
// spill file stands in between).
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) error
	Close(ctx context.Context) error
}

// Message is one raw record as a consumer receives it.
type Message struct {
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
}

// Consumer receives raw records of one topic for one consumer group.
// Commit marks messages (and everything before them in their partition) as
// processed.
type Consumer interface {
	Fetch(ctx context.Context) (Message, error)
	Commit(ctx context.Context, msgs ...Message) error
	Close(ctx context.Context) error
}

// ErrBusFull is returned by MemBus.Produce when its bound is reached; the
// caller keeps the deltas and tries again later.
var ErrBusFull = errors.New("events: in-memory bus full")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("events: closed")

// MemBus is an in-memory topic with a fixed number of partitions and one
// consumer group: a Producer, a Publisher and a Consumer in one value, for
// `velvetrope dev` and tests. Messages are partitioned by key hash, like Kafka; deltas
// are packed, encoded and decoded exactly as on Kafka, so the codec is exercised.
// Memory is bounded: at most maxPending uncommitted deltas (a raw record
// counts as one), and at most
// LimitBytes of their keys and values when set. A delta that can never be
// delivered is set aside as on Kafka ([Producer]).
type MemBus struct {
	mu           sync.Mutex
	wake         chan struct{} // closed and replaced when messages arrive
	parts        []memPart
	rr           int
	pending      int
	maxPending   int
	pendingBytes int64
	maxBytes     int64 // 0: no bound in bytes
	seed         maphash.Seed
	closed       bool

	// Dropped counts deltas set aside for good (invalid, or above
	// MaxRecordBytes); each is logged, at most one line per 10 s.
	Dropped atomic.Uint64
	dropLog atomic.Pointer[logx.Limited]
}

type memPart struct {
	msgs   []Message // uncommitted messages, oldest first
	counts []int     // the deltas of each (1 for a raw record): what maxPending bounds
	next   int64     // next offset to fetch
	end    int64     // next offset to assign
}

// NewMemBus returns a bus of partitions partitions holding at most
// maxPending uncommitted deltas (or one call's, when a single call holds
// more).
func NewMemBus(partitions, maxPending int) (*MemBus, error) {
	if partitions <= 0 || maxPending <= 0 {
		return nil, fmt.Errorf("events: mem bus needs partitions and maxPending > 0, got %d and %d", partitions, maxPending)
	}
	b := &MemBus{wake: make(chan struct{}), parts: make([]memPart, partitions), maxPending: maxPending,
		seed: maphash.MakeSeed()}
	b.SetLogger(slog.New(slog.DiscardHandler))
	return b, nil
}

// LimitBytes bounds the bytes (keys and values) of the uncommitted
// messages as well: past it Produce and Publish return ErrBusFull. For a
// bus of raw records of any size (dev's deferred topic), where a count
// alone bounds nothing.
func (b *MemBus) LimitBytes(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.maxBytes = n
}

// SetLogger makes the bus log the deltas it sets aside through l (by
// default it logs nothing, and counts them in Dropped).
func (b *MemBus) SetLogger(l *slog.Logger) { b.dropLog.Store(logx.New(l, 10*time.Second)) }

// DroppedDeltas implements [DropCounter].
func (b *MemBus) DroppedDeltas() uint64 { return b.Dropped.Load() }

// Partitions returns the partition count.
func (b *MemBus) Partitions() int { return len(b.parts) }

// Produce implements [Producer]: every deliverable delta or none (when
// the bus is full or closed), packed as on Kafka (v2 records of one
// partition each); an undeliverable one is set aside and the others go.
func (b *MemBus) Produce(_ context.Context, deltas []*eventsv1.Delta) error {
	recs := packer{max: MaxPackBytes, partOf: b.partitionOf, dropped: &b.Dropped, dropLog: b.dropLog.Load()}.pack(deltas)
	if len(recs) == 0 {
		return nil
	}
	msgs := make([]Message, len(recs))
	counts := make([]int, len(recs))
	for i, r := range recs {
		msgs[i], counts[i] = Message{Key: r.key, Value: r.value}, r.deltas
	}
	return b.produce(msgs, counts)
}

func (b *MemBus) partitionOf(key string) int {
	return int(maphash.String(b.seed, key) % uint64(len(b.parts)))
}

// Publish implements [Publisher]: raw records, all or none, partitioned
// by key.
func (b *MemBus) Publish(_ context.Context, msgs []Message) error { return b.produceRaw(msgs) }

// produceRaw appends raw messages (tests use it to inject bad records).
func (b *MemBus) produceRaw(msgs []Message) error { return b.produce(msgs, nil) }

// produce appends msgs, counts[i] deltas each (nil: one each), all or none.
func (b *MemBus) produce(msgs []Message, counts []int) error {
	weight := func(i int) int {
		if counts == nil {
			return 1
		}
		return counts[i]
	}
	total := 0
	for i := range msgs {
		total += weight(i)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	// A call larger than the bound is let onto an empty bus: refused, it
	// would be refused for ever (a producer retries the same call), and
	// the bus then holds at most one call beyond its bound.
	if b.pending+total > b.maxPending && b.pending > 0 {
		return ErrBusFull
	}
	var size int64
	for _, m := range msgs {
		size += msgBytes(m)
	}
	if b.maxBytes > 0 && b.pendingBytes+size > b.maxBytes {
		return ErrBusFull
	}
	b.pendingBytes += size
	for i, m := range msgs {
		p := b.partitionOf(string(m.Key))
		part := &b.parts[p]
		m.Partition, m.Offset = p, part.end
		part.end++
		part.msgs = append(part.msgs, m)
		part.counts = append(part.counts, weight(i))
	}
	b.pending += total
	close(b.wake)
	b.wake = make(chan struct{})
	return nil
}

// Fetch implements [Consumer]: the next unfetched message of any partition
// (round robin), waiting for one or for ctx.
func (b *MemBus) Fetch(ctx context.Context) (Message, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return Message{}, ErrClosed
		}
		for i := range b.parts {
			p := (b.rr + i) % len(b.parts)
			part := &b.parts[p]
			if part.next < part.end {
				first := part.end - int64(len(part.msgs))
				m := part.msgs[part.next-first]
				part.next++
				b.rr = p + 1
				b.mu.Unlock()
				return m, nil
			}
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
	}
}

// Commit implements [Consumer], dropping committed messages from memory.
func (b *MemBus) Commit(_ context.Context, msgs ...Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range msgs {
		if m.Partition < 0 || m.Partition >= len(b.parts) {
			return fmt.Errorf("events: commit of unknown partition %d", m.Partition)
		}
		part := &b.parts[m.Partition]
		first := part.end - int64(len(part.msgs))
		drop := m.Offset + 1 - first
		if drop <= 0 {
			continue
		}
		if drop > int64(len(part.msgs)) {
			drop = int64(len(part.msgs))
		}
		for i := range drop {
			b.pendingBytes -= msgBytes(part.msgs[i])
			b.pending -= part.counts[i]
		}
		clear(part.msgs[:drop]) // the array outlives the slice: let go of the values now
		part.msgs, part.counts = part.msgs[drop:], part.counts[drop:]
		if part.next < m.Offset+1 {
			part.next = m.Offset + 1
		}
	}
	return nil
}

func msgBytes(m Message) int64 { return int64(len(m.Key) + len(m.Value)) }

// Rewind makes every uncommitted message fetchable again, as a consumer
// group does for a consumer that died before committing.
func (b *MemBus) Rewind() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.parts {
		part := &b.parts[i]
		part.next = part.end - int64(len(part.msgs))
	}
	close(b.wake)
	b.wake = make(chan struct{})
}

// Pending returns how many deltas (and raw records) are not yet committed.
func (b *MemBus) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending
}

// Close implements [Producer] and [Consumer]; waiting fetches return ErrClosed.
func (b *MemBus) Close(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.wake)
	}
	return nil
}
