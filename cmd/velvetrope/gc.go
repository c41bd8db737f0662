package main

import (
	"log/slog"
	"runtime/debug"
	"strconv"
)

// gcPercent is the collector's target for a checker (and dev) whose
// environment does not set GOGC: the heap may grow to five times what is
// live before a cycle. At a per-IP front the flush and the gRPC transport
// allocate for every decision, and GOGC=100 collected several times a
// second. Measured on a quiet machine (velvetrope bench, 4 connections,
// 1,000,000 keys, one checker and aggregator on the real pipeline, four
// runs of each alternated): GOGC=400 answered 20–28 % more requests, its
// p99 16–26 % and p99.9 20–40 % lower, at 3–5 times the resident growth
// (126–204 MB against 27–59 MB over about 400,000 keys of one-second
// windows, most of them already freed).
const gcPercent = 400

// gcLimit is the soft memory limit that goes with it, unless GOMEMLIMIT
// is set: twice the key table's bound plus what a checker holds beside
// its keys, which is about where GOGC=100 left a full table. So a checker
// with few keys collects rarely, and one near checker.max_bytes collects
// as it did. With max_bytes 0 (max_keys alone) there is no bound to size
// it from, and the collector keeps Go's defaults.
func gcLimit(maxBytes int64) int64 { return 2*maxBytes + 256<<20 }

// tuneGC sets the collector for a checker as gcPercent and gcLimit say,
// leaving alone what the environment sets, and logs what it chose.
func tuneGC(maxBytes int64, lookup func(string) (string, bool), logger *slog.Logger) {
	if maxBytes <= 0 {
		return
	}
	_, gogc := lookup("GOGC")
	_, limit := lookup("GOMEMLIMIT")
	if gogc && limit {
		return
	}
	if !limit {
		debug.SetMemoryLimit(gcLimit(maxBytes))
	}
	if !gogc {
		debug.SetGCPercent(gcPercent)
	}
	logger.Info("garbage collector", "GOGC", gcValue(gogc, strconv.Itoa(gcPercent)),
		"GOMEMLIMIT", gcValue(limit, strconv.FormatInt(gcLimit(maxBytes), 10)))
}

func gcValue(fromEnv bool, chosen string) string {
	if fromEnv {
		return "from the environment"
	}
	return chosen
}
