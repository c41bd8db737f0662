package events

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Spill is an append-only file of records that could not be sent, kept in
// order until they can be replayed. The file starts with an 8-byte magic
// header ("VRSPILL" and a version byte); each record is a 4-byte
// little-endian payload length, a 4-byte CRC-32C of the payload, and the
// payload.
//
// Safety: the file is opened without following a symbolic link, must be a
// regular file owned by this process's user with no other hard link, and
// must be a spill file (the header, or for files written before the header
// existed, nothing but whole valid records). Anything else is refused and
// left untouched: a misconfigured path never truncates someone's file.
//
// Durability: every Append is written and fsynced before it returns, so a
// record the producer reported as accepted survives a crash or power loss.
// A crash in the middle of an Append leaves a torn tail (a short header,
// a short payload or a checksum mismatch); OpenSpill detects it, logs it and
// truncates the file to the last whole record.
//
// Bound: the file never grows past maxBytes; Append then returns
// ErrSpillFull and writes nothing (the caller keeps the data elsewhere).
type Spill struct {
	mu      sync.Mutex
	f       *os.File
	path    string
	base    int64 // where records start (after the header)
	size    int64 // bytes in the file
	cursor  int64 // replayed up to here (in-process only)
	records int64 // records after the cursor
	max     int64
	log     *slog.Logger

	truncated atomic.Int64 // torn-tail bytes dropped at open
}

// ErrSpillFull is returned when an Append would exceed the spill's bound.
var ErrSpillFull = errors.New("events: spill file full")

const spillHeader = 8

// spillMagic opens every spill file this version writes.
var spillMagic = []byte("VRSPILL\x01")

// ErrNotSpill is returned by OpenSpill for a file that is not ours.
var ErrNotSpill = errors.New("events: not a velvetrope spill file")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenSpill opens (creating if needed) the spill file at path, bounded to
// maxBytes, checks every record and truncates a torn tail.
func OpenSpill(path string, maxBytes int64, logger *slog.Logger) (*Spill, error) {
	if maxBytes <= spillHeader {
		return nil, fmt.Errorf("events: spill max bytes %d: too small", maxBytes)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link; refusing to follow it", ErrNotSpill, path)
		}
		return nil, fmt.Errorf("events: open spill: %w", err)
	}
	s, err := openSpill(f, path, maxBytes, logger)
	if err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func openSpill(f *os.File, path string, maxBytes int64, logger *slog.Logger) (*Spill, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file (%s)", ErrNotSpill, path, info.Mode().Type())
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		if int(st.Uid) != os.Geteuid() {
			return nil, fmt.Errorf("%w: %s belongs to uid %d, not this process's %d", ErrNotSpill, path, st.Uid, os.Geteuid())
		}
		if st.Nlink > 1 {
			return nil, fmt.Errorf("%w: %s has %d hard links", ErrNotSpill, path, st.Nlink)
		}
	}
	s := &Spill{f: f, path: path, max: maxBytes, log: logger}
	head := make([]byte, len(spillMagic))
	n, _ := f.ReadAt(head, 0)
	switch {
	case info.Size() == 0:
		if err := s.writeMagic(); err != nil {
			return nil, err
		}
		return s, nil
	case n == len(spillMagic) && string(head) == string(spillMagic):
		s.base, s.cursor = int64(len(spillMagic)), int64(len(spillMagic))
	default:
		// Written before the header existed, or not ours: only a file of
		// whole valid records is taken (as is, and replayed).
		good, records, err := scanSpill(f, 0)
		if err != nil {
			return nil, err
		}
		if good != info.Size() || records == 0 {
			return nil, fmt.Errorf("%w: %s has no spill header and is not a sequence of spill records; "+
				"refusing to use or truncate it (move it away, or point checker.state_dir elsewhere)", ErrNotSpill, path)
		}
		logger.Info("spill file from an earlier version (no header); replaying it as it is", "path", path, "records", records)
		s.size, s.records = good, records
		return s, nil
	}
	good, records, err := scanSpill(f, s.base)
	if err != nil {
		return nil, err
	}
	if info.Size() > good {
		logger.Warn("spill file has a torn tail (a crash during a write); truncating it",
			"path", path, "kept_bytes", good, "dropped_bytes", info.Size()-good, "records", records)
		if err := f.Truncate(good); err != nil {
			return nil, fmt.Errorf("events: truncate spill tail: %w", err)
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		s.truncated.Store(info.Size() - good)
	}
	s.size, s.records = good, records
	return s, nil
}

// writeMagic makes the file an empty spill: the header alone (requires
// s.mu held or no other user yet).
func (s *Spill) writeMagic() error {
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("events: reset spill: %w", err)
	}
	if _, err := s.f.WriteAt(spillMagic, 0); err != nil {
		return fmt.Errorf("events: write spill header: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("events: fsync spill: %w", err)
	}
	s.base = int64(len(spillMagic))
	s.size, s.cursor, s.records = s.base, s.base, 0
	return nil
}

// scanSpill returns the length of the longest prefix of whole, valid records.
func scanSpill(f *os.File, from int64) (good, records int64, err error) {
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return 0, 0, err
	}
	good = from
	r := bufio.NewReader(f)
	var hdr [spillHeader]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return good, records, nil // EOF or a short header: the tail ends here
		}
		n := binary.LittleEndian.Uint32(hdr[:4])
		if n > MaxPackBytes {
			return good, records, nil
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return good, records, nil
		}
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
			return good, records, nil
		}
		good += spillHeader + int64(n)
		records++
	}
}

// Append writes payloads as records, in order, and fsyncs: all or none.
func (s *Spill) Append(payloads [][]byte) error {
	need := int64(0)
	for _, p := range payloads {
		if len(p) > MaxPackBytes {
			return fmt.Errorf("events: spill record of %d bytes exceeds %d", len(p), MaxPackBytes)
		}
		need += spillHeader + int64(len(p))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size+need > s.max {
		return ErrSpillFull
	}
	buf := make([]byte, 0, need)
	for _, p := range payloads {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(p)))
		buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(p, castagnoli))
		buf = append(buf, p...)
	}
	if _, err := s.f.WriteAt(buf, s.size); err != nil {
		// leave nothing half-written behind for this process's readers
		_ = s.f.Truncate(s.size)
		return fmt.Errorf("events: write spill: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("events: fsync spill: %w", err)
	}
	s.size += need
	s.records += int64(len(payloads))
	return nil
}

// Replay reads the records not yet replayed, in order, in batches of at
// most batch records (and about replayBytes), and calls send for each batch. After a successful
// send the records count as replayed; when every record is, the file is
// truncated to empty. On a send error Replay stops and returns it; the next
// Replay resumes at the first unsent record. A crash loses only the cursor:
// the next process replays the file from the start, and the aggregator drops
// the copies by (instance, sequence).
func (s *Spill) Replay(batch int, send func([][]byte) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.cursor < s.size {
		payloads, next, err := s.read(s.cursor, batch)
		if err != nil {
			return err
		}
		if err := send(payloads); err != nil {
			return err
		}
		s.cursor = next
		s.records -= int64(len(payloads))
	}
	if s.size > s.base || s.base == 0 {
		// all replayed: back to the header alone (an old-format file gets one)
		return s.writeMagic()
	}
	return nil
}

// replayBytes bounds a replay batch in bytes as well (records are up to
// MaxPackBytes each; at least one is read).
const replayBytes = 8 << 20

// read returns up to n records starting at off (requires s.mu held).
func (s *Spill) read(off int64, n int) ([][]byte, int64, error) {
	r := bufio.NewReader(io.NewSectionReader(s.f, off, s.size-off))
	var out [][]byte
	var hdr [spillHeader]byte
	for read := 0; len(out) < n && off < s.size && (len(out) == 0 || read < replayBytes); {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, 0, fmt.Errorf("events: read spill at %d: %w", off, err)
		}
		l := binary.LittleEndian.Uint32(hdr[:4])
		p := make([]byte, l)
		if _, err := io.ReadFull(r, p); err != nil {
			return nil, 0, fmt.Errorf("events: read spill at %d: %w", off, err)
		}
		if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
			return nil, 0, fmt.Errorf("events: spill record at %d fails its checksum", off)
		}
		out = append(out, p)
		off += spillHeader + int64(l)
		read += len(p)
	}
	return out, off, nil
}

// Records returns how many records wait to be replayed.
func (s *Spill) Records() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records
}

// Bytes returns the bytes of records in the file (the header aside).
func (s *Spill) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size - s.base
}

// TruncatedBytes returns how many torn-tail bytes OpenSpill dropped.
func (s *Spill) TruncatedBytes() int64 { return s.truncated.Load() }

// Close closes the file; unreplayed records stay in it for the next start.
func (s *Spill) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Close()
}
