package metrics

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// RegisterProcess exposes what a soak or an operator watches for growth:
// goroutines, resident memory and the Go heap, as velvetrope_process_*.
func RegisterProcess(reg *Registry) {
	reg.Gauge("velvetrope_process_goroutines", "Goroutines of this process.", func() float64 { return float64(runtime.NumGoroutine()) })
	reg.Gauge("velvetrope_process_resident_bytes", "Resident memory of this process (Linux; -1 elsewhere).", residentBytes)
	reg.Gauge("velvetrope_process_heap_bytes", "Bytes of live and not yet collected heap objects.", func() float64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc)
	})
}

// residentBytes reads the resident set from /proc/self/statm (pages).
func residentBytes() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return -1
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return -1
	}
	return float64(pages * int64(os.Getpagesize()))
}
