package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times (100 on every Linux this runs on).
const clockTicks = 100

// cpuSeconds is a process's CPU time so far, user and system, all its
// threads (0 when it cannot be read).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// the command name, field 2, may hold spaces: count from its ')'
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 { // fields 3… : utime and stime are fields 14 and 15
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / clockTicks
}

// listener is the pid of the process listening on addr's TCP port on
// this machine (0 when none is found): the Kafka broker and Redis are
// started by scripts/services.sh, not by this program, so their CPU is
// found through the port they serve.
func listener(addr string) int {
	_, port, ok := strings.Cut(addr, ":")
	if !ok {
		return 0
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			fs := strings.Fields(s.Text())
			// sl local_address rem_address st ... inode (field 10)
			if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			if lp, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(lp) == p {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return 0
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && inodes[l] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}
