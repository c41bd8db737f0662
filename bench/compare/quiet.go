package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// quietBusy is the machine's busy share below which a row may start: the
// systems that are up but not measured (a million keys expiring in Redis,
// checkers dropping idle keys, the collector) have settled.
const quietBusy = 0.05

// waitQuiet waits until the whole machine has been below quietBusy for
// two half-second samples in a row, at most max, and says how long it
// waited. Every system stays up for the whole scenario; without it the
// first row of a cell paid for the last row's aftermath (the ceiling,
// measured first, came out below velvetrope's checker: 124 % in one run).
func waitQuiet(max time.Duration) time.Duration {
	start := time.Now()
	quiet := 0
	prevBusy, prevTotal, ok := cpuJiffies()
	for ok && time.Since(start) < max && quiet < 2 {
		time.Sleep(500 * time.Millisecond) // real time: the machine's load is what is measured
		busy, total, ok2 := cpuJiffies()
		if !ok2 || total <= prevTotal {
			break
		}
		if float64(busy-prevBusy)/float64(total-prevTotal) < quietBusy {
			quiet++
		} else {
			quiet = 0
		}
		prevBusy, prevTotal = busy, total
	}
	return time.Since(start)
}

// cpuJiffies reads the machine's busy and total CPU time from /proc/stat.
func cpuJiffies() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, true
}

// quietNote is the progress line of a wait.
func quietNote(d time.Duration) string {
	return fmt.Sprintf("waited %v for the machine to settle", d.Round(100*time.Millisecond))
}
