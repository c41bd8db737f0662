package config

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Rule files are read from regular files only, and a rules directory is
// a boundary: whatever reads rules (`velvetrope rules validate`, a
// process starting, the reloader) opens every file through one os.Root of
// the directory, so a symbolic link is followed only while it stays
// inside it. That is the layout of a mounted Kubernetes ConfigMap, which
// keeps working, its atomic updates included (the kubelet writes a new
// timestamped directory, then renames ..data onto it):
//
//	rules/x.yaml -> ..data/x.yaml
//	rules/..data -> ..2026_12_02_01_00_00.123/
//	rules/..2026_12_02_01_00_00.123/x.yaml
//
// A link out of the directory (rules/x.yaml -> /etc/shadow) is refused
// before anything is read: its lines never reach an error or a log. A
// FIFO, a socket or a device named x.yaml is refused without blocking:
// the file is opened with O_NONBLOCK (opening a FIFO that no one writes
// returns at once instead of waiting for a writer) and its type checked
// on the open descriptor, so nothing can swap the name between the check
// and the read.

// ruleFile is one rule file found under a path given to the loader.
type ruleFile struct {
	name string // as errors name it: the path given, joined with rel
	rel  string // under the directory ("" for a file given directly)
}

// ruleDir is one path given to the loader: a rules directory, opened as
// an os.Root, or a single file.
type ruleDir struct {
	path  string   // as given
	root  *os.Root // nil for a file given directly
	files []ruleFile
}

// openRuleDir lists the rule files of path: path itself when it is a
// file (the operator named it: it is opened as named), else the *.yaml
// and *.yml files under it, recursively, in lexical order. Directories
// whose names start with '.' are skipped (the timestamped copies of a
// ConfigMap, reached through its links), and so are links to directories.
// The caller closes it.
func openRuleDir(path string) (*ruleDir, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	d := &ruleDir{path: path}
	if !info.IsDir() {
		d.files = []ruleFile{{name: path}}
		return d, nil
	}
	if d.root, err = os.OpenRoot(path); err != nil {
		return nil, err
	}
	err = fs.WalkDir(d.root.FS(), ".", func(rel string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && rel != "." && strings.HasPrefix(e.Name(), ".") {
			return filepath.SkipDir // e.g. the ..2026_… copies of a Kubernetes ConfigMap
		}
		if ext := filepath.Ext(rel); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			d.files = append(d.files, ruleFile{name: filepath.Join(path, filepath.FromSlash(rel)), rel: rel})
		}
		return nil
	})
	if err == nil && len(d.files) == 0 {
		err = fmt.Errorf("no *.yaml or *.yml rule files in directory")
	}
	if err != nil {
		d.root.Close()
		return nil, err
	}
	slices.SortFunc(d.files, func(a, b ruleFile) int { return strings.Compare(a.name, b.name) })
	return d, nil
}

// Close releases the directory.
func (d *ruleDir) Close() {
	if d.root != nil {
		d.root.Close()
	}
}

// open opens f for reading if it is a regular file inside the directory
// (see the top of this file); the error says why not, naming no content.
func (d *ruleDir) open(f ruleFile) (*os.File, error) {
	// O_NONBLOCK: open returns at once on a FIFO; a regular file ignores it.
	const flags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY
	var fh *os.File
	var err error
	if d.root == nil {
		fh, err = os.OpenFile(f.name, flags, 0)
	} else {
		if err := d.inside(f); err != nil {
			return nil, err
		}
		// The Root follows links only within the directory, also if one
		// is swapped for a link out since inside looked.
		fh, err = d.root.OpenFile(filepath.FromSlash(f.rel), flags, 0)
	}
	if err != nil {
		// A socket cannot be opened at all (ENXIO): say what it is.
		if info, serr := d.stat(f); serr == nil && !info.Mode().IsRegular() {
			return nil, notRegular(info.Mode())
		}
		return nil, err
	}
	info, err := fh.Stat() // the descriptor's type, not the name's
	if err == nil && !info.Mode().IsRegular() {
		err = notRegular(info.Mode())
	}
	if err != nil {
		fh.Close()
		return nil, err
	}
	return fh, nil
}

// inside refuses f when it is a link that leads out of the directory,
// naming where it leads (a path, never the content). The Root would
// refuse it too; this says why in an operator's words.
func (d *ruleDir) inside(f ruleFile) error {
	info, err := d.root.Lstat(filepath.FromSlash(f.rel))
	if err != nil || info.Mode()&fs.ModeSymlink == 0 {
		return nil // the open reports it, or there is no link to judge
	}
	target, err := filepath.EvalSymlinks(f.name)
	if err != nil {
		return fmt.Errorf("a symbolic link that does not resolve: %w", err)
	}
	dir, err := filepath.EvalSymlinks(d.path)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(dir, target); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("a symbolic link to %s, outside the rules directory %s: a link is followed only within the directory", target, d.path)
	}
	if link, err := os.Readlink(f.name); err == nil && filepath.IsAbs(link) {
		return fmt.Errorf("a symbolic link to an absolute path (%s): within the rules directory, link with a relative path (as a Kubernetes ConfigMap does)", link)
	}
	return nil
}

// read returns f's content, refusing files above MaxRuleFileBytes
// without reading them whole.
func (d *ruleDir) read(f ruleFile) ([]byte, error) {
	fh, err := d.open(f)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxRuleFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxRuleFileBytes {
		return nil, fmt.Errorf("rule file larger than %d bytes", MaxRuleFileBytes)
	}
	return data, nil
}

// hash streams at most MaxRuleFileBytes+1 bytes of f into h: a huge file
// still changes the digest (and is then refused by the loader) without
// being held in memory.
func (d *ruleDir) hash(h io.Writer, f ruleFile) error {
	fh, err := d.open(f)
	if err != nil {
		return err
	}
	defer fh.Close()
	_, err = io.Copy(h, io.LimitReader(fh, MaxRuleFileBytes+1))
	return err
}

// stat describes f as the open would find it (links followed within the
// directory).
func (d *ruleDir) stat(f ruleFile) (fs.FileInfo, error) {
	if d.root == nil {
		return os.Stat(f.name)
	}
	return d.root.Stat(filepath.FromSlash(f.rel))
}

func notRegular(m fs.FileMode) error {
	return fmt.Errorf("not a regular file (%s): rules are read from regular files only", typeName(m))
}

// typeName names a file type that is not a regular file.
func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return "type " + m.Type().String()
}
