#!/usr/bin/env bash
# fuzz.sh FUZZTIME pkg:Target... — fuzzes each target for FUZZTIME (make fuzz-short).
#
# A target that fails with only "context deadline exceeded" and writes no
# failing input is Go's fuzz coordinator racing its own -fuzztime deadline
# (golang/go#75804, fixed in Go 1.27; this toolchain is 1.26): it is run
# once more. Any other failure, or a failing input written under the
# package's testdata/fuzz/, fails at once.
set -uo pipefail
fuzztime=$1
shift
go=${GO:-go}
for t in "$@"; do
	pkg=${t%%:*} fn=${t##*:}
	for attempt in 1 2; do
		echo "fuzz $fn ($pkg) for $fuzztime"
		log=$(mktemp)
		"$go" test -run '^$' -fuzz "^$fn\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s "$pkg" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		if [ "$rc" -eq 0 ]; then rm -f "$log"; break; fi
		# the race's whole report is one message line, "    context deadline exceeded"
		if [ "$attempt" -eq 1 ] && ! grep -qE 'Failing input written|panic:' "$log" &&
			[ "$(grep -E '^    ' "$log")" = "    context deadline exceeded" ]; then
			echo "fuzz $fn: the fuzzer's deadline race (golang/go#75804), no failing input: once more"
			rm -f "$log"
			continue
		fi
		rm -f "$log"
		exit "$rc"
	done
done
