package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func payloads(from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf("record-%04d", from+i))
	}
	return out
}

func replayAll(t *testing.T, s *Spill) []string {
	t.Helper()
	var got []string
	if err := s.Replay(3, func(b [][]byte) error {
		for _, p := range b {
			got = append(got, string(p))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestSpillOrderAndResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spill")
	s, err := OpenSpill(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Append(payloads(0, 5))
	s.Append(payloads(5, 5))
	if s.Records() != 10 {
		t.Fatalf("records %d, want 10", s.Records())
	}
	// the second batch fails: replay stops there and resumes there
	calls := 0
	err = s.Replay(3, func(b [][]byte) error {
		calls++
		if calls == 2 {
			return errors.New("kafka down")
		}
		return nil
	})
	if err == nil || s.Records() != 7 {
		t.Fatalf("after a failed batch: err %v, records %d (want 7 left)", err, s.Records())
	}
	got := replayAll(t, s)
	if len(got) != 7 || got[0] != "record-0003" || got[6] != "record-0009" {
		t.Fatalf("resumed replay: %v", got)
	}
	if s.Bytes() != 0 {
		t.Fatalf("replayed spill not truncated: %d bytes", s.Bytes())
	}
	s.Close()
}

func TestSpillSurvivesRestartAndTruncatesTornTail(t *testing.T) {
	for _, tear := range []struct {
		name string
		tail []byte
	}{
		{"short header", []byte{7, 0}},
		{"short payload", []byte{10, 0, 0, 0, 1, 2, 3, 4, 'a', 'b'}},
		{"bad checksum", []byte{2, 0, 0, 0, 1, 2, 3, 4, 'a', 'b'}},
		{"absurd length", []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0}},
	} {
		t.Run(tear.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "spill")
			s, _ := OpenSpill(path, 1<<20, nil)
			s.Append(payloads(0, 4))
			s.Close()
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.Write(tear.tail) // a crash in the middle of the next Append
			f.Close()
			s, err := OpenSpill(path, 1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.TruncatedBytes() != int64(len(tear.tail)) || s.Records() != 4 {
				t.Fatalf("truncated %d bytes, %d records; want %d and 4", s.TruncatedBytes(), s.Records(), len(tear.tail))
			}
			s.Append(payloads(4, 1)) // appends after the cut, not after the garbage
			if got := replayAll(t, s); len(got) != 5 || got[4] != "record-0004" {
				t.Fatalf("after reopen: %v", got)
			}
		})
	}
}

func TestSpillBound(t *testing.T) {
	s, _ := OpenSpill(filepath.Join(t.TempDir(), "spill"), 100, nil)
	if err := s.Append(payloads(0, 4)); err != nil { // 4 × (8 + 11) = 76 bytes
		t.Fatal(err)
	}
	if err := s.Append(payloads(4, 2)); !errors.Is(err, ErrSpillFull) {
		t.Fatalf("over the bound: %v", err)
	}
	if s.Records() != 4 || s.Bytes() != 76 {
		t.Fatalf("a refused append wrote: %d records %d bytes", s.Records(), s.Bytes())
	}
	if _, err := OpenSpill(filepath.Join(t.TempDir(), "x"), 4, nil); err == nil {
		t.Fatal("tiny bound accepted")
	}
}

// TestSpillRefusesWhatIsNotOurs: issue 10, item 9. Before, any existing
// file at the spill path that did not parse as records was truncated, and
// a symbolic link was followed.
func TestSpillRefusesWhatIsNotOurs(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "precious.txt")
	content := []byte("root:x:0:0:root:/root:/bin/bash\n")
	if err := os.WriteFile(precious, content, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.spill")
	if err := os.Symlink(precious, link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.spill")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.spill")
	if err := os.Link(other, hard); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, want string
	}{
		{"a symbolic link", link, "symbolic link"},
		{"a file that is not a spill", precious, "no spill header"},
		{"a second hard link to a file", hard, "hard links"},
		{"a directory", dir, "open spill"},
	}
	for i, c := range cases {
		s, err := OpenSpill(c.path, 1<<20, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("step %d (%s): got %v, want an error containing %q", i, c.name, err, c.want)
		}
	}
	if got, _ := os.ReadFile(precious); string(got) != string(content) {
		t.Fatalf("the foreign file was changed: %q", got)
	}
}

// TestSpillFromBeforeTheHeader: a file of whole records without the header
// (written by an earlier version) is replayed, then gets the header.
func TestSpillFromBeforeTheHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.spill")
	var old []byte
	for _, p := range payloads(0, 3) {
		old = binary.LittleEndian.AppendUint32(old, uint32(len(p)))
		old = binary.LittleEndian.AppendUint32(old, crc32.Checksum(p, castagnoli))
		old = append(old, p...)
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSpill(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := replayAll(t, s); len(got) != 3 || got[2] != "record-0002" {
		t.Fatalf("replayed %v", got)
	}
	s.Append(payloads(3, 1))
	s.Close()
	raw, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(raw), string(spillMagic)) {
		t.Fatalf("after replay the file has no header: %q", raw)
	}
	s, err = OpenSpill(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := replayAll(t, s); len(got) != 1 || got[0] != "record-0003" {
		t.Fatalf("after reopen: %v", got)
	}
}
