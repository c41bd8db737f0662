#!/usr/bin/env bash
# benchpair.sh: one Go benchmark of a package at two revisions, interleaved
# round by round so both see the same host (this machine is shared and
# noisy: a ratio within one round is what means something). Prints each
# revision's median ns/op, the allocs/op it reported and the median of the per-round
# ratios to the first revision.
#
#   scripts/benchpair.sh [-r ROUNDS] [-t BENCHTIME] PKG BENCH REV_A [REV_B]
#
# REV_B defaults to the working tree. Example:
#   scripts/benchpair.sh -r 30 ./checker BenchmarkCheckAsyncParallel db73f49
set -euo pipefail

rounds=20 benchtime=250ms
while getopts r:t: o; do
	case $o in
	r) rounds=$OPTARG ;;
	t) benchtime=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -lt 3 ]; then
	sed -n '2,11p' "$0" >&2
	exit 2
fi
pkg=$1 bench=$2 reva=$3 revb=${4:-}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/a" >/dev/null 2>&1 || true; [ -z "$revb" ] || git -C "$root" worktree remove --force "$work/b" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

build() { # build REV DIR OUT: the package's test binary at REV ("" = working tree)
	local dir=$root
	if [ -n "$1" ]; then
		git -C "$root" worktree add --detach "$2" "$1" >/dev/null 2>&1
		dir=$2
	fi
	(cd "$dir" && go test -c -o "$3" "$pkg")
}
build "$reva" "$work/a" "$work/a.test"
build "$revb" "$work/b" "$work/b.test"

for r in $(seq 1 "$rounds"); do
	order="a b"
	[ $((r % 2)) -eq 0 ] && order="b a" # neither always runs first
	for v in $order; do
		"$work/$v.test" -test.run='^$' -test.bench="^${bench}\$" -test.benchtime="$benchtime" -test.benchmem |
			awk -v r="$r" -v v="$v" '/ns\/op/ { for (i = 1; i < NF; i++) { if ($(i+1) == "ns/op") ns = $i; if ($(i+1) == "allocs/op") al = $i } print r, v, ns, al }'
	done
done >"$work/out"

awk -v a="${reva}" -v b="${revb:-working tree}" -v bench="$bench" '
	{ ns[$1, $2] = $3; if (!seen[$2, $4]++) al[$2] = al[$2] " " $4; if ($1 > n) n = $1 }
	function median(x, k,   i, j, t) { # sorts x[1..k] in place
		for (i = 2; i <= k; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j+1] = x[j]; x[j+1] = t }
		return k % 2 ? x[(k+1)/2] : (x[k/2] + x[k/2+1]) / 2
	}
	END {
		for (r = 1; r <= n; r++) { xa[r] = ns[r, "a"]; xb[r] = ns[r, "b"]; q[r] = ns[r, "b"] / ns[r, "a"] }
		printf "%s, %d rounds\n", bench, n
		printf "  %-14s %10.1f ns/op  allocs/op:%s\n", a, median(xa, n), al["a"]
		printf "  %-14s %10.1f ns/op  allocs/op:%s\n", b, median(xb, n), al["b"]
		printf "  median ratio (second / first): %.3f\n", median(q, n)
	}' "$work/out"
