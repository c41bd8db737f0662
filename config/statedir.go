package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ResolveStateDir returns the directory for files that must survive a
// restart (see CheckerConfig.StateDir), creating it (0700) if needed. A
// directory anyone may write to (such as /tmp) is refused: another user
// could plant or swap the files in it.
func ResolveStateDir(configured string, getenv func(string) (string, bool)) (string, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	var candidates []string
	switch {
	case configured != "":
		candidates = []string{configured}
	default:
		if v, ok := getenv("STATE_DIRECTORY"); ok && v != "" {
			candidates = append(candidates, strings.Split(v, ":")[0])
		}
		candidates = append(candidates, "/var/lib/velvetrope")
		if v, ok := getenv("XDG_STATE_HOME"); ok && v != "" {
			candidates = append(candidates, filepath.Join(v, "velvetrope"))
		} else if home, err := os.UserHomeDir(); err == nil {
			candidates = append(candidates, filepath.Join(home, ".local", "state", "velvetrope"))
		}
	}
	var errs []string
	for _, dir := range candidates {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		info, err := os.Stat(dir)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if !info.IsDir() {
			errs = append(errs, dir+": not a directory")
			continue
		}
		if info.Mode().Perm()&0o002 != 0 {
			errs = append(errs, dir+": writable by every user; give velvetrope a directory of its own")
			continue
		}
		probe, err := os.CreateTemp(dir, ".probe-*")
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		probe.Close()
		os.Remove(probe.Name())
		return dir, nil
	}
	return "", fmt.Errorf("checker.state_dir: no usable state directory (%s)", strings.Join(errs, "; "))
}
