package main

import (
	"net"
	"os"
	"testing"
)

// TestProcessCPUAndListener: this process's CPU time grows as it works,
// and the listener of a port it opened is found to be itself.
func TestProcessCPUAndListener(t *testing.T) {
	before := cpuSeconds(os.Getpid())
	x := 0
	for i := range 300_000_000 { // about 0.1 s of CPU: more than a clock tick
		x ^= i
	}
	if after := cpuSeconds(os.Getpid()); after <= before {
		t.Fatalf("CPU seconds %v then %v (x=%d)", before, after, x)
	}
	if cpuSeconds(-1) != 0 {
		t.Fatal("a process that does not exist has CPU time")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if pid := listener(l.Addr().String()); pid != os.Getpid() {
		t.Fatalf("listener of %s: pid %d, want %d", l.Addr(), pid, os.Getpid())
	}
	free := freeAddr()
	if pid := listener(free); pid != 0 {
		t.Fatalf("a free port %s has listener %d", free, pid)
	}
	if listener("nonsense") != 0 {
		t.Fatal("an address without a port has a listener")
	}
}
